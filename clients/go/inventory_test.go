package redislock_test

const helperEnv = "REDISLOCK_GO_HELPER"

func helperMain() int { return 0 }
