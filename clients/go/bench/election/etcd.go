package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

const etcdPrefix = "/bench/leader"

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a one-member etcd on loopback in a fresh directory; stop kills it by PID.
func startEtcd() (addr string, stop func(), err error) {
	bin := os.Getenv("ETCD")
	if bin == "" {
		bin = "etcd"
	}
	client, err := freePort()
	if err != nil {
		return "", nil, err
	}
	peer, err := freePort()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "bench-etcd-")
	if err != nil {
		return "", nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--log-level", "error")
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start etcd (apt-get install etcd-server): %w", err)
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	addr = "127.0.0.1:" + strconv.Itoa(client)
	cli, err := etcdClient(addr)
	if err == nil {
		defer func() { _ = cli.Close() }()
		for i := 0; i < 200; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = cli.Get(ctx, "ready")
			cancel()
			if err == nil {
				return addr, stop, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stop()
	return "", nil, fmt.Errorf("etcd did not answer: %w", err)
}

func etcdClient(addr string) (*clientv3.Client, error) {
	// Quiet: its retries while a candidate is killed are expected here.
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func ttlSeconds(ttl time.Duration) int {
	return max(1, int((ttl+time.Second-1)/time.Second))
}

// etcdSession connects to addr and opens a session whose lease lives ttl (whole seconds).
func etcdSession(addr string, ttl time.Duration) (*clientv3.Client, *concurrency.Session, error) {
	cli, err := etcdClient(addr)
	if err != nil {
		return nil, nil, err
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(ttlSeconds(ttl)))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return cli, session, nil
}

var etcdSystem = system{
	name: "etcd concurrency.Election",
	candidate: func(addr, id string, ttl time.Duration) error {
		cli, session, err := etcdSession(addr, ttl)
		if err != nil {
			return err
		}
		defer func() { _ = cli.Close() }()
		ctx := context.Background()
		e := concurrency.NewElection(session, etcdPrefix)
		if err := e.Campaign(ctx, id); err != nil {
			return err
		}
		say("LEADER")
		// The fenced write: only while the leader's key is the one this campaign created.
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())).
			Then(clientv3.OpPut("/bench/data", id)).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("the fenced write was refused")
		}
		say("WROTE")
		if waitForResign(session.Done()) {
			if err := e.Resign(ctx); err != nil {
				return err
			}
		}
		return session.Close()
	},
	observe: func(ctx context.Context, addr string, ttl time.Duration, seen func(string)) error {
		cli, session, err := etcdSession(addr, ttl)
		if err != nil {
			return err
		}
		defer func() { _ = cli.Close() }()
		defer func() { _ = session.Close() }()
		for resp := range concurrency.NewElection(session, etcdPrefix).Observe(ctx) {
			if len(resp.Kvs) > 0 {
				seen(string(resp.Kvs[0].Value))
			}
		}
		return ctx.Err()
	},
}
