// The README's example (Install), compiled with the tests; ReadmeTest checks it is this file's
// code word for word, and make test-install-java runs it in a fresh project.
import io.lettuce.core.RedisClient;
import io.redislock.Hold;
import io.redislock.LockServiceUnavailableException;
import io.redislock.NotAcquiredException;
import io.redislock.RedisLocks;
import java.time.Duration;

public class Example {
    public static void main(String[] args) throws InterruptedException {
        RedisClient client = RedisClient.create("redis://localhost:6379");
        RedisLocks locks = RedisLocks.create(client);
        try (Hold hold = locks.acquire("{sku:9}:lock", Duration.ofSeconds(5))) { // waits up to 5 s
            hold.guard("DECRBY", "{sku:9}:stock", "1");   // runs only while the hold is live
            System.out.println("sold one under token " + hold.token());
        } catch (NotAcquiredException e) {
            System.out.println("busy: not granted within 5 s");
        } catch (LockServiceUnavailableException e) {           // down or unreachable, within 10 s
            System.out.println("refusing the sale: " + e.getMessage()); // or fall back, knowing the risk
        } finally {
            locks.close();
            client.shutdown();
        }
    }
}
