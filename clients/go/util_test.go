package redislock_test

import (
	"strconv"
	"strings"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// parseID is the id= field of a CLIENT LIST line.
func parseID(line string) int64 {
	for _, field := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(field, "id="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
