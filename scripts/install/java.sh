#!/usr/bin/env bash
# make test-install-java: clients/java/README.md's install block run as written (from the
# repository's root, where its `cd clients/java` starts), then fresh Maven projects outside the
# repository that depend on what it installed, with the README's <dependency> blocks: the core's
# runs the README's example against a real server; one per Spring Integration build (6 and 7)
# resolves its jar and its Spring Integration and runs a ModuleLockRegistry on the server, so the
# two builds are checked to install side by side.
#
# The user's ~/.m2 is not written: every mvn of this test (the README's install included) runs on
# a private copy of ~/.m2/repository (MAVEN_OPTS=-Dmaven.repo.local=..., removed on exit), taken
# without io/redislock so that no jar of an earlier build is found there. What is not in the copy
# comes from Maven Central into the copy.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
started=$SECONDS

fresh_project
local_repo="$project/m2"
mkdir -p "$local_repo"
if [ -d "$HOME/.m2/repository" ]; then
    cp -a "$HOME/.m2/repository/." "$local_repo/"
    rm -rf "$local_repo/io/redislock"
fi
export MAVEN_OPTS="${MAVEN_OPTS:-} -Dmaven.repo.local=$local_repo"
readme="$repo/clients/java/README.md"

(cd "$repo" && bash -euo pipefail -c "$(readme_block "$readme" install)") >"$project/install.log" 2>&1 \
    || { cat "$project/install.log" >&2; fail "the README's install block failed"; }
for a in redis-lock-client redis-lock-spring-integration redis-lock-spring-integration-6; do
    [ -f "$local_repo/io/redislock/$a/0.1.0-SNAPSHOT/$a-0.1.0-SNAPSHOT.jar" ] || fail "$a was not installed"
done

# A Maven project in $1 depending on the README block $2; its runtime classpath in $1/cp.txt.
maven_project() {
    mkdir -p "$1"
    cat >"$1/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>$(basename "$1")</artifactId>
  <version>1</version>
  <dependencies>
$(readme_block "$readme" "$2")
  </dependencies>
</project>
EOF
    (cd "$1" && mvn -B -q --no-transfer-progress dependency:build-classpath -Dmdep.outputFile=cp.txt) \
        >"$1/mvn.log" 2>&1 || { cat "$1/mvn.log" >&2; fail "$2: the dependency did not resolve"; }
}

start_server

# The core: the README's example, as written but for the port; it prints the token and nothing else.
maven_project "$project/core" dependency
on_port "$(readme_block "$readme" example)" >"$project/core/Example.java"
(cd "$project/core" && java -cp "$(cat cp.txt)" Example.java) >"$project/core/out" 2>"$project/core/err" \
    || { cat "$project/core/out" "$project/core/err" >&2; fail "the example failed"; }
grep -qx 'sold one under token [0-9]*' "$project/core/out" \
    || { cat "$project/core/out" "$project/core/err" >&2; fail "the example printed no token"; }
[ "$(redis-cli -p "$port" GET '{sku:9}:stock')" = -1 ] || fail "the example's guarded write did not run"
if grep -v '^SLF4J: ' "$project/core/err" | grep -q .; then
    cat "$project/core/err" >&2
    fail "the example logged on stderr (rule 18: closing logs nothing)"
fi

# Each Spring Integration build: its own jar and its own Spring Integration, a registry that locks.
cat >"$project/Registry.java" <<EOF
import io.lettuce.core.RedisClient;
import io.redislock.RedisLocks;
import io.redislock.spring.ModuleLockRegistry;
import java.time.Duration;

public class Registry {
    public static void main(String[] args) throws Exception {
        RedisClient client = RedisClient.create("redis://localhost:$port");
        RedisLocks locks = RedisLocks.create(client);
        ModuleLockRegistry registry = new ModuleLockRegistry(locks, "orders:");
        registry.executeLocked("42", Duration.ofSeconds(5), () -> System.out.println("locked"));
        System.out.println(org.springframework.integration.support.locks.LockRegistry.class
                .getProtectionDomain().getCodeSource().getLocation());
        locks.close();
        client.shutdown();
    }
}
EOF
for version in 6 7; do
    dir="$project/spring$version"
    maven_project "$dir" "dependency-spring-integration-$version"
    (cd "$dir" && java -cp "$(cat cp.txt)" ../Registry.java) >"$dir/out" 2>"$dir/err" \
        || { cat "$dir/out" "$dir/err" >&2; fail "the Spring Integration $version registry failed"; }
    grep -qx locked "$dir/out" || fail "Spring Integration $version: not locked"
    grep -q "spring-integration-core-$version\." "$dir/out" \
        || { cat "$dir/out" >&2; fail "the Spring Integration $version build ran on another version"; }
done

pass "installed as the README says, the example and both Spring Integration builds ran ($((SECONDS - started)) s)"
