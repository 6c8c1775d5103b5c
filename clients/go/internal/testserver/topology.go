package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinels monitor the master under.
const MasterName = "lockm"

// Eventually polls cond every 10 ms until it holds or limit passes; whether it held.
func Eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// A Deployment is a master and a replica (each with the module) and three Sentinels watching
// them (quorum 2, a master down after 1 s).
type Deployment struct {
	Master, Replica *Server
	Sentinels       []*Server
}

// StartDeployment starts it and returns once the replica is in sync and every Sentinel sees
// the replica and the two other Sentinels.
func StartDeployment() (*Deployment, error) {
	d := &Deployment{}
	var err error
	if d.Master, err = Start("--repl-diskless-sync-delay", "0"); err != nil {
		return nil, err
	}
	if d.Replica, err = Start("--replicaof", "127.0.0.1", strconv.Itoa(d.Master.Port),
		"--repl-diskless-sync-delay", "0"); err != nil {
		d.Stop()
		return nil, err
	}
	for range 3 {
		s, err := startSentinel(d.Master.Port)
		if err != nil {
			d.Stop()
			return nil, err
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	ctx := context.Background()
	replica := d.Replica.Client()
	defer func() { _ = replica.Close() }()
	if !Eventually(20*time.Second, func() bool {
		return Info(ctx, replica, "replication", "master_link_status") == "up"
	}) {
		d.Stop()
		return nil, fmt.Errorf("the replica never synced")
	}
	// Hellos every 2 s, the replica from the master's INFO: seconds when idle; 90 s for a
	// loaded machine (the Python twin of this wait once took more than 30 beside a soak).
	if !Eventually(90*time.Second, d.sentinelsReady) {
		d.Stop()
		return nil, fmt.Errorf("the Sentinels never saw the replica and each other")
	}
	return d, nil
}

func startSentinel(masterPort int) (*Server, error) {
	dir, err := os.MkdirTemp("", "redislock-go-sentinel-")
	if err != nil {
		return nil, err
	}
	s := &Server{Port: FreePort(), Dir: dir}
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 3000\n", s.Port, dir, MasterName, masterPort, MasterName, MasterName)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(Binary(), conf, "--sentinel")
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	if err := s.waitUp(10 * time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("a Sentinel: %w", err)
	}
	return s, nil
}

func (d *Deployment) sentinelsReady() bool {
	ctx := context.Background()
	for _, s := range d.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		m, err := c.Master(ctx, MasterName).Result()
		_ = c.Close()
		if err != nil || m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" {
			return false
		}
	}
	return true
}

// SentinelAddrs are the Sentinels' addresses.
func (d *Deployment) SentinelAddrs() []string {
	var addrs []string
	for _, s := range d.Sentinels {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// Named is the master's address as the Sentinels name it ("" if they do not).
func (d *Deployment) Named() string {
	c := redis.NewSentinelClient(&redis.Options{Addr: d.Sentinels[0].Addr()})
	defer func() { _ = c.Close() }()
	addr, err := c.GetMasterAddrByName(context.Background(), MasterName).Result()
	if err != nil || len(addr) != 2 {
		return ""
	}
	return addr[0] + ":" + addr[1]
}

// Stop kills every process.
func (d *Deployment) Stop() {
	for _, s := range d.Sentinels {
		s.Stop()
	}
	for _, s := range []*Server{d.Master, d.Replica} {
		if s != nil {
			s.Stop()
		}
	}
}

// A Cluster is a Redis Cluster of three masters (no replicas) on loopback, each with the
// module, made with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts it and returns once every node says cluster_state:ok.
func StartCluster() (*Cluster, error) {
	c := &Cluster{}
	for range 3 {
		s, err := Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	ctx := context.Background()
	for _, n := range c.Nodes {
		client := n.Client()
		ok := Eventually(30*time.Second, func() bool {
			info, _ := client.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok")
		})
		_ = client.Close()
		if !ok {
			c.Stop()
			return nil, fmt.Errorf("the cluster never became ok")
		}
	}
	return c, nil
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}
