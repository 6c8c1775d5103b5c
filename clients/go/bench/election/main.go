// Command election measures leader handover: this repository's redislock Election (rules 21
// and 22 of docs/clients.md: a session hold in the server's FIFO queue, observed with
// LOCK.WATCH) against etcd's concurrency.Election (a key on a lease, observed with a watch), in
// one run on one machine. For each, over several rounds: the time from the leader's kill -9 to
// the next leader's first fenced write, from the leader's resign to the next leader's first
// fenced write, and from each to an observer reporting the new leader.
//
// Usage: election [-rounds 5] [-ttl 2s] [-systems redislock,etcd]
//
// It starts a redis-server with the module (LOCK_TEST_SERVER, LOCK_MODULE) and an etcd (ETCD,
// default the etcd on the PATH: Debian's etcd-server) of its own on loopback, and its
// candidates as processes of itself (-candidate etcd|redislock -id NAME -addr ADDR), which print
// LEADER and WROTE lines and resign on a line on their stdin. Every process it starts is
// stopped by PID when it ends.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A system is an election implementation: its candidate (run in a process of its own) and its
// observer (run in this process).
type system struct {
	name string
	// candidate campaigns as id against addr and reports (runs in the child process).
	candidate func(addr, id string, ttl time.Duration) error
	// observe calls seen(identity) for each leader it reports until ctx ends.
	observe func(ctx context.Context, addr string, ttl time.Duration, seen func(id string)) error
}

var systems = map[string]system{
	"redislock": redislockSystem,
	"etcd":      etcdSystem,
}

// say prints a line the parent reads: LEADER or WROTE, then the wall time in ns.
func say(what string) {
	fmt.Printf("%s %d\n", what, time.Now().UnixNano())
}

// waitForResign blocks until a line comes on stdin (the parent asks the leader to resign), or
// until lost is closed.
func waitForResign(lost <-chan struct{}) bool {
	line := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(line)
	}()
	select {
	case <-line:
		return true
	case <-lost:
		return false
	}
}

// A proc is a candidate process and the times of its lines.
type proc struct {
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines map[string]time.Time
	ready chan string
}

func start(sys, addr, id string, ttl time.Duration) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-candidate", sys, "-id", id, "-addr", addr, "-ttl", ttl.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{id: id, cmd: cmd, stdin: stdin, lines: map[string]time.Time{}, ready: make(chan string, 4)}
	go func() {
		scan := bufio.NewScanner(stdout)
		for scan.Scan() {
			what, ns, ok := strings.Cut(scan.Text(), " ")
			n, err := strconv.ParseInt(ns, 10, 64)
			if !ok || err != nil {
				continue
			}
			p.mu.Lock()
			p.lines[what] = time.Unix(0, n)
			p.mu.Unlock()
			p.ready <- what
		}
	}()
	return p, nil
}

// wrote waits (up to within) for the WROTE line and returns its time.
func (p *proc) wrote(within time.Duration) (time.Time, bool) {
	deadline := time.After(within)
	for {
		select {
		case what := <-p.ready:
			if what == "WROTE" {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.lines["WROTE"], true
			}
		case <-deadline:
			return time.Time{}, false
		}
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// An observer remembers when it first reported each leader.
type observer struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (o *observer) note(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[id]; !ok {
		o.seen[id] = time.Now()
	}
}

// saw waits (up to within) until the observer reported id.
func (o *observer) saw(id string, within time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		at, ok := o.seen[id]
		o.mu.Unlock()
		if ok {
			return at, true
		}
		time.Sleep(100 * time.Microsecond)
	}
	return time.Time{}, false
}

// samples of one measure, in ms.
type samples []float64

func (s samples) String() string {
	if len(s) == 0 {
		return "-"
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	return fmt.Sprintf("%.1f / %.1f", sorted[len(sorted)/2], sorted[len(sorted)-1])
}

func (s samples) median() float64 {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

type measures struct {
	killWrite, killSeen, resignWrite, resignSeen samples
	failed                                       int
}

// One round: two candidates; the leader killed; a third joins; the new leader resigns.
func round(sys, addr string, ttl time.Duration, o *observer, r int, m *measures) error {
	a, err := start(sys, addr, fmt.Sprintf("a%d", r), ttl)
	if err != nil {
		return err
	}
	defer a.kill()
	if _, ok := a.wrote(30 * time.Second); !ok {
		return fmt.Errorf("%s: the first candidate never wrote", sys)
	}
	b, err := start(sys, addr, fmt.Sprintf("b%d", r), ttl)
	if err != nil {
		return err
	}
	defer b.kill()
	time.Sleep(500 * time.Millisecond) // b campaigns (waits) before the kill
	bound := 10*ttl + 10*time.Second
	killed := time.Now()
	a.kill()
	wrote, ok := b.wrote(bound)
	seen, ok2 := o.saw(b.id, bound)
	if !ok || !ok2 {
		m.failed++
		return nil
	}
	m.killWrite = append(m.killWrite, ms(wrote.Sub(killed)))
	m.killSeen = append(m.killSeen, ms(seen.Sub(killed)))
	c, err := start(sys, addr, fmt.Sprintf("c%d", r), ttl)
	if err != nil {
		return err
	}
	defer c.kill()
	time.Sleep(500 * time.Millisecond) // c campaigns before the resign
	resigned := time.Now()
	_, _ = io.WriteString(b.stdin, "resign\n")
	wrote, ok = c.wrote(bound)
	seen, ok2 = o.saw(c.id, bound)
	if !ok || !ok2 {
		m.failed++
		return nil
	}
	m.resignWrite = append(m.resignWrite, ms(wrote.Sub(resigned)))
	m.resignSeen = append(m.resignSeen, ms(seen.Sub(resigned)))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func measure(sys, addr string, ttl time.Duration, rounds int) (measures, error) {
	var m measures
	o := &observer{seen: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := systems[sys].observe(ctx, addr, ttl, o.note); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "%s observer: %v\n", sys, err)
		}
	}()
	for r := 0; r < rounds; r++ {
		if err := round(sys, addr, ttl, o, r, &m); err != nil {
			return m, err
		}
	}
	return m, nil
}

func main() {
	candidate := flag.String("candidate", "", "run as a candidate of this system")
	id := flag.String("id", "", "the candidate's identity")
	addr := flag.String("addr", "", "the candidate's server")
	ttl := flag.Duration("ttl", 2*time.Second, "the leader's lease (etcd: whole seconds)")
	rounds := flag.Int("rounds", 5, "rounds per system")
	which := flag.String("systems", "redislock,etcd", "the systems to measure")
	flag.Parse()
	if *candidate != "" {
		if err := systems[*candidate].candidate(*addr, *id, *ttl); err != nil {
			fmt.Fprintf(os.Stderr, "candidate %s: %v\n", *id, err)
			os.Exit(1)
		}
		return
	}
	if err := run(*ttl, *rounds, strings.Split(*which, ",")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ttl time.Duration, rounds int, which []string) error {
	redisAddr, stopRedis, err := startRedis()
	if err != nil {
		return err
	}
	defer stopRedis()
	etcdAddr, stopEtcd, err := startEtcd()
	if err != nil {
		return err
	}
	defer stopEtcd()
	results := map[string]measures{}
	for _, sys := range which {
		addr := redisAddr
		if sys == "etcd" {
			addr = etcdAddr
		}
		m, err := measure(sys, addr, ttl, rounds)
		if err != nil {
			return err
		}
		results[sys] = m
	}
	report(results, ttl, rounds)
	return nil
}

func report(results map[string]measures, ttl time.Duration, rounds int) {
	fmt.Printf("leader handover, %d rounds each, lease %v, p50 / max ms\n\n", rounds, ttl)
	fmt.Println("| measure | redislock | etcd concurrency.Election | ratio (etcd / redislock, p50) |")
	fmt.Println("|---|---|---|---|")
	ours, etcd := results["redislock"], results["etcd"]
	rows := []struct {
		name string
		a, b samples
	}{
		{"kill -9 of the leader -> the next leader's first fenced write", ours.killWrite, etcd.killWrite},
		{"kill -9 of the leader -> an observer reports the next", ours.killSeen, etcd.killSeen},
		{"resign -> the next leader's first fenced write", ours.resignWrite, etcd.resignWrite},
		{"resign -> an observer reports the next", ours.resignSeen, etcd.resignSeen},
	}
	for _, r := range rows {
		ratio := "-"
		if r.a.median() > 0 {
			ratio = fmt.Sprintf("%.1fx", r.b.median()/r.a.median())
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.a, r.b, ratio)
	}
	fmt.Printf("\nrounds that did not hand over within the bound: redislock %d, etcd %d\n", ours.failed, etcd.failed)
}
