// Package testserver starts the servers the tests and the benchmark run against: redis-server
// (or the binary LOCK_TEST_SERVER names) with the module LOCK_MODULE (default: the repository's
// target/debug/libredis_lock.so) on free loopback ports (never 6379), each in a temporary
// directory, stopped by PID.
package testserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

// Binary is the server binary: LOCK_TEST_SERVER, or redis-server.
func Binary() string {
	if b := os.Getenv("LOCK_TEST_SERVER"); b != "" {
		return b
	}
	return "redis-server"
}

// Module is the module's path: LOCK_MODULE, or target/debug/libredis_lock.so of the repository.
func Module() string {
	if m := os.Getenv("LOCK_MODULE"); m != "" {
		return m
	}
	return filepath.Join(Root(), "target", "debug", "libredis_lock.so")
}

// FreePort is a free loopback port whose cluster bus port (port + 10000) is free too.
func FreePort() int {
	for {
		port := 20000 + rand.IntN(30000)
		if free(port) && free(port+10000) {
			return port
		}
	}
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// A Server is one server process.
type Server struct {
	Port int
	Dir  string
	cmd  *exec.Cmd
	args []string // what it was started with (Restart starts it so again)
}

// Start starts a server with the module and extra arguments, and returns once it answers.
func Start(extra ...string) (*Server, error) {
	return start(true, extra...)
}

// StartPlain starts a server without the module.
func StartPlain(extra ...string) (*Server, error) {
	return start(false, extra...)
}

func start(module bool, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redislock-go-")
	if err != nil {
		return nil, err
	}
	s := &Server{Port: FreePort(), Dir: dir}
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no"}
	if module {
		args = append(args, "--loadmodule", Module())
	}
	s.args = append(args, extra...)
	s.cmd = exec.Command(Binary(), s.args...)
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", Binary(), err)
	}
	if err := s.waitUp(10 * time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%s with %s on port %d: %w", Binary(), Module(), s.Port, err)
	}
	return s, nil
}

func (s *Server) waitUp(limit time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(limit)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Pid is the process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Client is a new client of this server (close it).
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr()})
}

// Signal sends sig to the process.
func (s *Server) Signal(sig syscall.Signal) { _ = s.cmd.Process.Signal(sig) }

// Kill sends SIGKILL (kill -9) and reaps the process.
func (s *Server) Kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// Restart kills the process (kill -9) and starts it again on the same port, in the same
// directory (with its data, when its arguments persist it: --appendonly yes), returning once
// it answers.
func (s *Server) Restart() error {
	s.Kill()
	s.cmd = exec.Command(Binary(), s.args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("restart %s: %w", Binary(), err)
	}
	return s.waitUp(10 * time.Second)
}

// Stop kills the process and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	_ = os.RemoveAll(s.Dir)
}

// Info is one field of INFO section.
func Info(ctx context.Context, c redis.UniversalClient, section, field string) string {
	text, _ := c.Info(ctx, section).Result()
	for _, line := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// Calls is how many times the server ran command (INFO commandstats).
func Calls(ctx context.Context, c redis.UniversalClient, command string) int {
	stats := Info(ctx, c, "commandstats", "cmdstat_"+command)
	v, _ := strings.CutPrefix(strings.Split(stats, ",")[0], "calls=")
	n, _ := strconv.Atoi(v)
	return n
}
