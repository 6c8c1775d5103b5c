package redislock_test

// Elections (rules 21 and 22 of docs/clients.md): candidates and observers in processes of
// their own (this test binary, re-executed), against a real server: a leader killed with
// kill -9, frozen past its lease with SIGSTOP, resigning; observers that see every leader in
// order of term, across a server restart too.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/redis-lock/redis-lock/clients/go"
)

const (
	candidateEnv   = "REDISLOCK_GO_CANDIDATE" // a candidate process: its identity
	observerEnv    = "REDISLOCK_GO_OBSERVER"  // an observer process
	electionKeyEnv = "REDISLOCK_GO_ELECTION"  // the election's key
	leaderTTLEnv   = "REDISLOCK_GO_LEADER_TTL"
)

// writesOf is the list a leader appends its term to, with guarded writes, while it leads.
func writesOf(key string) string { return key + ":writes" }

// candidateMain is a candidate process: it campaigns, says "leader <term>" when it leads and
// appends its term to the writes' list every 20 ms (Guard) while it does. When its
// leadership ends it says "lost <term> <matches ErrLost> <cause>" and sends a guarded write
// with the old term itself ("refused <term>" when the server answers STALE), or, on the line
// "resign" on its stdin, resigns and says "resigned <term> <error>". It ends when its stdin
// closes.
func candidateMain() int {
	r := redis.NewClient(&redis.Options{Addr: os.Getenv(helperAddr)})
	defer func() { _ = r.Close() }()
	locker := redislock.New(r)
	defer func() { _ = locker.Close() }()
	ms, _ := strconv.Atoi(os.Getenv(leaderTTLEnv))
	key := os.Getenv(electionKeyEnv)
	election := redislock.NewElection(locker, key, os.Getenv(candidateEnv),
		redislock.WithLeaderTTL(time.Duration(ms)*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	commands := make(chan string)
	go func() {
		defer cancel()
		defer close(commands)
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			commands <- in.Text()
		}
	}()
	lead, err := election.Campaign(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	term := lead.Term()
	fmt.Println("leader", term)
	var writing sync.WaitGroup
	writing.Go(func() {
		for lead.Context().Err() == nil {
			_ = lead.Guard(context.Background(), "RPUSH", writesOf(key), term).Err()
			select {
			case <-lead.Context().Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	defer writing.Wait()
	ended := lead.Context().Done()
	for {
		select {
		case <-ended:
			cause := context.Cause(lead.Context())
			if errors.Is(cause, redislock.ErrResigned) {
				ended = nil
				continue
			}
			fmt.Println("lost", term, errors.Is(cause, redislock.ErrLost), cause)
			// The old term's write, sent to the server as it is (Guard would refuse it itself).
			err := r.Do(context.Background(), "LOCK.GUARD", key, term, "RPUSH", writesOf(key), term).Err()
			if err != nil && strings.HasPrefix(err.Error(), "STALE") {
				fmt.Println("refused", term)
			} else {
				fmt.Println("accepted", term, err)
			}
			for range commands {
			}
			return 0
		case command, ok := <-commands:
			if !ok {
				return 0
			}
			if command == "resign" {
				fmt.Println("resigned", term, lead.Resign(context.Background()))
			}
		}
	}
}

// observerMain is an observer process: it says each leader Observe reports, "leader
// <identity> <term>" or "none", until its stdin closes.
func observerMain() int {
	r := redis.NewClient(&redis.Options{Addr: os.Getenv(helperAddr)})
	defer func() { _ = r.Close() }()
	locker := redislock.New(r)
	defer func() { _ = locker.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
	}()
	for leader := range redislock.NewElection(locker, os.Getenv(electionKeyEnv), "").Observe(ctx) {
		if leader.None() {
			fmt.Println("none")
		} else {
			fmt.Println("leader", leader.Identity, leader.Term)
		}
	}
	return 0
}

// A line is one line a process printed, and when the test read it.
type line struct {
	text string
	at   time.Time
}

// A proc is a candidate or observer process, and the lines it printed.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin interface{ Write([]byte) (int, error) }
	mu    sync.Mutex
	part  []byte
	lines []line
}

// Write collects the process's output, line by line, each with its arrival time.
func (p *proc) Write(b []byte) (int, error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := strings.IndexByte(string(p.part), '\n')
		if i < 0 {
			return len(b), nil
		}
		p.lines = append(p.lines, line{string(p.part[:i]), now})
		p.part = p.part[i+1:]
	}
}

// texts is the lines' text.
func texts(lines []line) []string {
	var all []string
	for _, l := range lines {
		all = append(all, l.text)
	}
	return all
}

// output is what the process printed so far.
func (p *proc) output() []line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]line(nil), p.lines...)
}

// with is the lines that start with prefix.
func (p *proc) with(prefix string) []line {
	var found []line
	for _, l := range p.output() {
		if strings.HasPrefix(l.text, prefix) {
			found = append(found, l)
		}
	}
	return found
}

// await waits (bounded) for a line starting with prefix.
func (p *proc) await(t *testing.T, limit time.Duration, prefix string) line {
	t.Helper()
	eventually(t, limit, p.name+" says "+prefix, func() bool { return len(p.with(prefix)) > 0 })
	return p.with(prefix)[0]
}

// spawn starts this test binary as a candidate (identity name) or an observer; killed (by
// PID, after a SIGCONT) at the test's end.
func spawn(t *testing.T, observer bool, name string, env []string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(os.Args[0], "-test.run=^$")}
	role := candidateEnv + "=" + name
	if observer {
		role = observerEnv + "=1"
	}
	p.cmd.Env = append(append(os.Environ(), env...), role)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		t.Logf("%s printed: %q", p.name, texts(p.output()))
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// A leadership seen in a candidate's output.
type term struct {
	who  string
	term int64
	at   time.Time // when the test read its "leader" line
}

func (l term) String() string { return fmt.Sprintf("%s %d", l.who, l.term) }

// leadersOf is every "leader <term>" line of the candidates.
func leadersOf(cands []*proc) []term {
	var all []term
	for _, c := range cands {
		for _, l := range c.with("leader ") {
			n, _ := strconv.ParseInt(strings.TrimPrefix(l.text, "leader "), 10, 64)
			all = append(all, term{c.name, n, l.at})
		}
	}
	return all
}

// nextLeader waits (bounded) for a leadership not among known, and checks it is the only new
// one, with a term larger than every known one.
func nextLeader(t *testing.T, cands []*proc, known []term, limit time.Duration) term {
	t.Helper()
	var fresh []term
	eventually(t, limit, "a new leader", func() bool {
		fresh = nil
		for _, l := range leadersOf(cands) {
			if !contains(known, l) {
				fresh = append(fresh, l)
			}
		}
		return len(fresh) > 0
	})
	if len(fresh) != 1 {
		t.Fatalf("two new leaders at once: %v", fresh)
	}
	for _, k := range known {
		if fresh[0].term <= k.term {
			t.Fatalf("new leader %v, not a larger term than %v", fresh[0], k)
		}
	}
	return fresh[0]
}

func contains(known []term, l term) bool {
	for _, k := range known {
		if k.who == l.who && k.term == l.term {
			return true
		}
	}
	return false
}

// reported is the leaders an observer reported ("none" left out).
func reported(o *proc) []term {
	var all []term
	for _, l := range o.with("leader ") {
		var who string
		var n int64
		if _, err := fmt.Sscanf(l.text, "leader %s %d", &who, &n); err == nil {
			all = append(all, term{who, n, l.at})
		}
	}
	return all
}

// caughtUp waits (bounded) until each observer's last report is l.
func caughtUp(t *testing.T, observers []*proc, l term, limit time.Duration) {
	t.Helper()
	for _, o := range observers {
		eventually(t, limit, o.name+" reports "+l.String(), func() bool {
			all := o.output()
			return len(all) > 0 && all[len(all)-1].text == "leader "+l.String()
		})
	}
}

// spaced waits until at least a second has passed since l (the changes a second apart: a
// watch may merge changes closer together than its round trip).
func spaced(l term) { time.Sleep(time.Until(l.at.Add(time.Second))) }

// Rules 21 and 22, the rows "three candidates in three processes" (kill -9, SIGSTOP, resign)
// and "observers in two more processes" of the same case, same answer: one candidate leads;
// killed with kill -9 the next one leads at once (its session closed), with a larger term;
// the next leader frozen with SIGSTOP past its 3 s lease is replaced at the lease's end, and
// once continued it is told once that it lost leadership, and its write with the old term is
// refused; the next one resigns and the next candidate leads at once. Two observers see
// every leader in order of term, ending with the current one, and the guarded writes of the
// leaders are in order of term (never two leaders whose fenced writes both succeed).
func TestElectionThreeCandidatesKill9SigstopResignAndTwoObservers(t *testing.T) {
	s := server(t)
	r := client(t, s)
	const key = "{election:1}:leader"
	const ttl = 3 * time.Second
	env := []string{helperAddr + "=" + s.Addr(), electionKeyEnv + "=" + key,
		leaderTTLEnv + "=" + itoa(ttl.Milliseconds())}
	observers := []*proc{spawn(t, true, "observer1", env), spawn(t, true, "observer2", env)}
	for _, o := range observers {
		o.await(t, 10*time.Second, "none") // the current state first: no leader yet
	}
	var cands []*proc
	for i := range 3 {
		cands = append(cands, spawn(t, false, "candidate"+strconv.Itoa(i), env))
	}
	byName := func(l term) *proc {
		for _, c := range cands {
			if c.name == l.who {
				return c
			}
		}
		t.Fatalf("no candidate %s", l.who)
		return nil
	}
	first := nextLeader(t, cands, nil, 10*time.Second)
	eventually(t, 10*time.Second, "two candidates queued", func() bool { return waiters(t, r, key) == 2 })
	leaders := []term{first}
	caughtUp(t, observers, first, 5*time.Second)
	spaced(first)

	// kill -9: the session's connection closes, the next candidate leads at once. Bound:
	// 1 s on a loaded 2-core machine (it takes milliseconds), a third of the 3 s lease: the
	// handover is the session's end, not the lease's.
	killed := time.Now()
	_ = byName(first).cmd.Process.Kill()
	second := nextLeader(t, cands, leaders, 5*time.Second)
	killToLeader := second.at.Sub(killed)
	if killToLeader > time.Second {
		t.Fatalf("kill -9 to the next leader: %v, over 1 s", killToLeader)
	}
	leaders = append(leaders, second)
	cands = append(cands, spawn(t, false, "candidate3", env)) // three candidates again
	eventually(t, 10*time.Second, "two candidates queued", func() bool { return waiters(t, r, key) == 2 })
	caughtUp(t, observers, second, 5*time.Second)
	spaced(second)
	// Half a renewal interval (ttl/3) on, so that the freeze falls between two renewals.
	time.Sleep(time.Until(second.at.Add(3 * ttl / 2 / 3)))

	// SIGSTOP past the lease: the next candidate leads at the lease's end. Its last renewal
	// was at most a third of the ttl before the freeze, so not before ttl/2 (a margin under
	// 2/3 ttl), and not after ttl + 1.5 s (the margin of a loaded machine).
	frozen := byName(second)
	stopped := time.Now()
	frozen.signal(syscall.SIGSTOP)
	third := nextLeader(t, cands, leaders, ttl+5*time.Second)
	stopToLeader := third.at.Sub(stopped)
	if stopToLeader < ttl/2 || stopToLeader > ttl+1500*time.Millisecond {
		t.Fatalf("SIGSTOP to the next leader: %v, not within [%v, %v]", stopToLeader, ttl/2, ttl+1500*time.Millisecond)
	}
	leaders = append(leaders, third)
	caughtUp(t, observers, third, 5*time.Second)
	spaced(third)
	// Continued, it is told it lost leadership: its lease ended while it was stopped, so at
	// once (bound 2 s), and its write with the old term is refused by the server.
	continued := time.Now()
	frozen.signal(syscall.SIGCONT)
	lost := frozen.await(t, 2*time.Second, "lost ")
	told := lost.at.Sub(continued)
	if want := fmt.Sprintf("lost %d true ", second.term); !strings.HasPrefix(lost.text, want) {
		t.Fatalf("the frozen leader said %q, want %q...", lost.text, want)
	}
	frozen.await(t, 2*time.Second, "refused "+itoa(second.term))

	// Resign: the next candidate in the queue leads at once (a handoff). Bound: 1 s.
	resigner := byName(third)
	resigned := time.Now()
	_, _ = resigner.stdin.Write([]byte("resign\n"))
	fourth := nextLeader(t, cands, leaders, 5*time.Second)
	resignToLeader := fourth.at.Sub(resigned)
	if resignToLeader > time.Second {
		t.Fatalf("resign to the next leader: %v, over 1 s", resignToLeader)
	}
	if said := resigner.await(t, 2*time.Second, "resigned "); said.text != "resigned "+itoa(third.term)+" <nil>" {
		t.Fatalf("the resigning leader said %q", said.text)
	}
	leaders = append(leaders, fourth)
	caughtUp(t, observers, fourth, 5*time.Second)

	// The server's leader is the last one; each observer saw every leader in order of term,
	// and told each once; the frozen leader was told once, nobody else was.
	l, err := redislock.NewElection(redislock.New(r), key, "").Leader(ctx)
	if err != nil || l.Identity != fourth.who || l.Term != fourth.term || fence(r, key) != fourth.term {
		t.Fatalf("the server's leader %+v (%v), fence %d; want %v", l, err, fence(r, key), fourth)
	}
	var lags []time.Duration
	for _, o := range observers {
		seen := reported(o)
		if fmt.Sprint(seen) != fmt.Sprint(leaders) {
			t.Fatalf("%s saw %v, want %v", o.name, seen, leaders)
		}
		for i, l := range seen {
			lags = append(lags, l.at.Sub(leaders[i].at))
		}
	}
	for _, c := range cands {
		if n := len(c.with("lost ")); c != frozen && n != 0 || c == frozen && n != 1 {
			t.Fatalf("%s was told %d times it lost leadership: %q", c.name, n, texts(c.output()))
		}
		if accepted := c.with("accepted "); len(accepted) > 0 {
			t.Fatalf("%s: a write with an old term was accepted: %q", c.name, texts(accepted))
		}
	}
	// The guarded writes are in order of term: a stale leader's write never came after a
	// newer leader's.
	writes, err := r.LRange(ctx, writesOf(key), 0, -1).Result()
	if err != nil || len(writes) == 0 {
		t.Fatalf("writes %v, %v", writes, err)
	}
	terms := map[int64]bool{}
	for _, l := range leaders {
		terms[l.term] = true
	}
	for i, w := range writes {
		n, _ := strconv.ParseInt(w, 10, 64)
		if !terms[n] || i > 0 && w != writes[i-1] && n < mustInt(writes[i-1]) {
			t.Fatalf("write %d of term %s after %v", i, w, writes[:i])
		}
	}
	t.Logf("leaders %v; kill -9 to the next leader %v, SIGSTOP %v (lease %v), told lost %v after SIGCONT, "+
		"resign %v; observers' lag %v; %d guarded writes in order of term",
		leaders, killToLeader, stopToLeader, ttl, told, resignToLeader, lags, len(writes))
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Rule 22, the row "an observer's server restarted": an observer whose server is killed
// (kill -9) and started again on the same port with its data (AOF) connects again, passes its
// last cursor and reports the server's latest leader: the candidate that leads after the
// restart, never the one before twice in a row. The old leader's session closed with the
// server: it is told it lost leadership.
func TestElectionAnObserverFollowsTheLatestLeaderAcrossAServerRestart(t *testing.T) {
	s := server(t, "--appendonly", "yes", "--appendfsync", "always")
	r := client(t, s)
	const key = "{election:2}:leader"
	const ttl = 2 * time.Second
	locker := redislock.New(r)
	defer func() { _ = locker.Close() }()
	a := redislock.NewElection(locker, key, "a", redislock.WithLeaderTTL(ttl))
	first, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watch, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var seen []term
	last := func() term {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return term{}
		}
		return seen[len(seen)-1]
	}
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for l := range a.Observe(watch) {
			mu.Lock()
			seen = append(seen, term{l.Identity, l.Term, time.Now()})
			mu.Unlock()
		}
	}()
	eventually(t, 5*time.Second, "the observer reports a", func() bool { return last().term == first.Term() })

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// a's session's connection closed with the server: a is told (at its next renewal, a
	// third of the lease, or its end; bound: the lease plus 1 s).
	select {
	case <-first.Context().Done():
		if cause := context.Cause(first.Context()); !errors.Is(cause, redislock.ErrLost) {
			t.Fatalf("a's leadership ended with %v", cause)
		}
	case <-time.After(ttl + time.Second):
		t.Fatal("a was not told it lost leadership")
	}
	// b leads once the restarted server has let a's hold go (a restarted server keeps a
	// session hold until its lease's end: bound, the lease plus 2 s).
	b := redislock.NewElection(locker, key, "b", redislock.WithLeaderTTL(ttl))
	bounded, cancel := context.WithTimeout(ctx, ttl+2*time.Second)
	defer cancel()
	second, err := b.Campaign(bounded)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	if second.Term() <= first.Term() {
		t.Fatalf("b's term %d, not larger than a's %d", second.Term(), first.Term())
	}
	eventually(t, 3*time.Second, "the observer reports b", func() bool { return last().term == second.Term() })
	lag := last().at.Sub(granted)
	if l, err := b.Leader(ctx); err != nil || l.Identity != "b" || l.Term != second.Term() {
		t.Fatalf("Leader() = %+v, %v", l, err)
	}
	stop()
	<-observed
	for i := 1; i < len(seen); i++ {
		if seen[i].who == seen[i-1].who && seen[i].term == seen[i-1].term {
			t.Fatalf("the same leader twice in a row: %v", seen)
		}
		if seen[i].term != 0 && seen[i].term < seen[i-1].term {
			t.Fatalf("an older leader after a newer one: %v", seen)
		}
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("seen %v; b granted %v after the restart, reported %v later", seen, granted.Sub(restarted), lag)
}

// Rules 21 and 22 in one process: Leader and Observe before, during and after leaderships;
// Campaign bounded by its context; Resign hands over at once and cancels the leadership's
// context with ErrResigned; a leadership lost (LOCK.FORCERELEASE) cancels it once with the
// loss, its Guard is stale and its Resign answers the loss; arguments are checked.
func TestElectionCampaignLeaderObserveResignAndLoss(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	defer func() { _ = locker.Close() }()
	const key = "{election:3}:leader"
	one := redislock.NewElection(locker, key, "one", redislock.WithLeaderTTL(1500*time.Millisecond))
	two := redislock.NewElection(locker, key, "two", redislock.WithLeaderTTL(1500*time.Millisecond))
	if l, err := one.Leader(ctx); err != nil || !l.None() {
		t.Fatalf("Leader() of a free election = %+v, %v", l, err)
	}
	watch, stop := context.WithCancel(ctx)
	defer stop()
	leaders := one.Observe(watch)
	next := func() redislock.Leader {
		t.Helper()
		select {
		case l := <-leaders:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("Observe reported nothing within 5 s")
			return redislock.Leader{}
		}
	}
	if l := next(); !l.None() {
		t.Fatalf("Observe first reported %+v, want none", l)
	}

	lead1, err := one.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Identity != "one" || l.Term != lead1.Term() || lead1.Identity() != "one" {
		t.Fatalf("Observe reported %+v; term %d", l, lead1.Term())
	}
	if l, err := two.Leader(ctx); err != nil || l != (redislock.Leader{Identity: "one", Term: lead1.Term()}) {
		t.Fatalf("Leader() = %+v, %v", l, err)
	}
	if err := lead1.Guard(ctx, "SET", "{election:3}:data", "one").Err(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := two.Campaign(short); !errors.Is(err, redislock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a bounded campaign: %v", err)
	}
	campaign := make(chan *redislock.Leadership, 1)
	go func() {
		lead, err := two.Campaign(ctx)
		if err != nil {
			t.Error(err)
		}
		campaign <- lead
	}()
	eventually(t, 5*time.Second, "two queued", func() bool { return waiters(t, r, key) == 1 })

	resigned := time.Now()
	if err := lead1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var lead2 *redislock.Leadership
	select {
	case lead2 = <-campaign:
	case <-time.After(time.Second):
		t.Fatal("two did not lead within 1 s of the resignation")
	}
	handover := time.Since(resigned)
	if lead2 == nil || lead2.Term() <= lead1.Term() {
		t.Fatal("no larger term after the resignation")
	}
	if cause := context.Cause(lead1.Context()); !errors.Is(cause, redislock.ErrResigned) || lead1.Err() != nil {
		t.Fatalf("resigned: cause %v, err %v", cause, lead1.Err())
	}
	if err := lead1.Resign(ctx); err != nil {
		t.Fatalf("a second Resign: %v", err)
	}
	if err := lead1.Guard(ctx, "SET", "{election:3}:data", "one").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("a resigned leader's Guard: %v", err)
	}
	if l := next(); l.Identity != "two" || l.Term != lead2.Term() {
		t.Fatalf("Observe reported %+v after the resignation", l)
	}

	// Lost: an operator force-releases the lock; the watchdog's next renewal (a third of the
	// 1.5 s lease) finds it gone. Bound: the lease.
	r.Do(ctx, "LOCK.FORCERELEASE", key)
	select {
	case <-lead2.Context().Done():
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("the loss was not signalled within the lease")
	}
	cause := context.Cause(lead2.Context())
	if !errors.Is(cause, redislock.ErrLost) || !errors.Is(lead2.Err(), redislock.ErrLost) ||
		!strings.HasSuffix(cause.Error(), "the lease ran out before it was renewed") {
		t.Fatalf("lost: cause %v, err %v", cause, lead2.Err())
	}
	if err := lead2.Guard(ctx, "SET", "{election:3}:data", "two").Err(); !errors.Is(err, redislock.ErrStale) {
		t.Fatalf("a lost leader's Guard: %v", err)
	}
	if err := lead2.Resign(ctx); !errors.Is(err, redislock.ErrLost) {
		t.Fatalf("a lost leader's Resign: %v", err)
	}
	if cause := context.Cause(lead2.Context()); !errors.Is(cause, redislock.ErrLost) {
		t.Fatalf("Resign after the loss changed the cause to %v", cause)
	}
	if l := next(); !l.None() {
		t.Fatalf("Observe reported %+v after the force-release", l)
	}

	// Observe's channel closes when its context ends.
	stop()
	select {
	case _, open := <-leaders:
		if open {
			t.Fatal("Observe reported a leader after its context ended")
		}
	case <-time.After(time.Second):
		t.Fatal("Observe's channel was not closed within 1 s of its context's end")
	}
	if _, err := redislock.NewElection(locker, key, "").Campaign(ctx); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("an empty identity: %v", err)
	}
	if _, err := redislock.NewElection(locker, key, "x", redislock.WithLeaderTTL(0)).Campaign(ctx); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("a ttl of 0: %v", err)
	}
	t.Logf("resign to the next leader: %v", handover)
}

// watching is the ids of the connections blocked in LOCK.WATCH (CLIENT LIST).
func watching(r *redis.Client) []int64 {
	list, _ := r.ClientList(ctx).Result()
	var ids []int64
	for _, l := range strings.Split(list, "\n") {
		if strings.Contains(l, " cmd=lock.watch") && strings.Contains(l, " flags=b") {
			ids = append(ids, parseID(l))
		}
	}
	return ids
}

// Rule 22: an observer's connection killed (CLIENT KILL), or its watch unblocked with an error
// (CLIENT UNBLOCK ... ERROR: UNBLOCKED, a reply of rule 19) or without (a nil reply, as at
// the end of its WAIT), is asked again (on a new connection after a kill or UNBLOCKED, with
// its last cursor) and reports nothing meanwhile: the leader did not change. It reports the
// next change.
func TestElectionObserveAsksAgainAfterAKillOrAnUnblock(t *testing.T) {
	r := client(t, server(t))
	locker := redislock.New(r)
	defer func() { _ = locker.Close() }()
	const key = "{election:4}:leader"
	election := redislock.NewElection(locker, key, "one")
	lead, err := election.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watch, stop := context.WithCancel(ctx)
	defer stop()
	leaders := election.Observe(watch)
	if l := <-leaders; l.Identity != "one" || l.Term != lead.Term() {
		t.Fatalf("Observe reported %+v first", l)
	}
	blockedOn := func(not int64) int64 {
		t.Helper()
		var id int64
		eventually(t, 5*time.Second, "a watch blocked on another connection than "+itoa(not), func() bool {
			ids := watching(r)
			if len(ids) == 1 && ids[0] != not {
				id = ids[0]
			}
			return id != 0
		})
		return id
	}
	first := blockedOn(0)
	if err := r.Do(ctx, "CLIENT", "KILL", "ID", first).Err(); err != nil {
		t.Fatal(err)
	}
	second := blockedOn(first)
	// CLIENT UNBLOCK answers a module's blocked client on Redis 7.2+ and Valkey (1), not on
	// Redis 7.0 (0: the watch stays blocked).
	withError, _ := r.Do(ctx, "CLIENT", "UNBLOCK", second, "ERROR").Int()
	if withError == 1 {
		second = blockedOn(second) // UNBLOCKED: a new connection
	}
	asNil, _ := r.Do(ctx, "CLIENT", "UNBLOCK", second).Int()
	if asNil == 1 {
		eventually(t, 5*time.Second, "the watch asked again", func() bool { return len(watching(r)) == 1 })
	}
	t.Logf("CLIENT UNBLOCK ... ERROR answered %d, CLIENT UNBLOCK %d", withError, asNil)
	select {
	case l := <-leaders:
		t.Fatalf("Observe reported %+v, the leader unchanged", l)
	default:
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-leaders:
		if !l.None() {
			t.Fatalf("Observe reported %+v after the resignation", l)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Observe did not report the resignation within 2 s")
	}
}
