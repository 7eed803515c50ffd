package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/internal/node"
	"github.com/airlock-dev/airlock/sandbox/kube"
)

const nodeLong = `
Run the node agent (a DaemonSet, deploy/node-daemonset.yaml): it holds kernel enforcement for
every pod on this node labelled airlock.dev/inject: "true", so the injected sidecar runs without
any privilege (airlock run --node-agent).

For each such pod it finds the pod's and the sidecar container's cgroups in the node's cgroup v2
hierarchy, binds the abstract unix socket @airlock-node-v1 in the pod's network namespace, and
accepts there only processes of the sidecar container (SO_PEERCRED). On the sidecar's hello it
attaches and pins the eBPF programs on the pod's cgroup (the sidecar's container exempt) under
--pin-root/NAMESPACE~POD, then serves the sidecar's map operations and sends it the kernel's
deny events. A deleted pod's pins are removed. When the agent stops, every pod stays enforced;
the next agent adopts the pins.

It needs root on the node: hostPID, the node's /sys/fs/cgroup and /sys/fs/bpf, and the
capabilities to attach cgroup eBPF programs and enter network namespaces.

Every flag can also be set from the environment: --node-name from AIRLOCK_NODE_NAME, and so on.`

// nodeConfig is what airlock node is told.
type nodeConfig struct {
	nodeName, kubeconfig, cgroupRoot, pinRoot, logLevel string
}

func nodeCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("node", "airlock node --node-name NODE [flags]", nodeLong, stderr)
	c := &nodeConfig{}
	fs.StringVar(&c.nodeName, "node-name", "", "this node's name (required; the DaemonSet sets it from spec.nodeName)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the in-cluster service account)")
	fs.StringVar(&c.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the node's cgroup hierarchy is mounted (cgroup v2, or hybrid with the v2 hierarchy at unified/)")
	fs.StringVar(&c.pinRoot, "pin-root", "/sys/fs/bpf/airlock", "bpffs directory for the pods' pins (the node's /sys/fs/bpf)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug | info | warn | error")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return cli.Failf("node: unexpected argument %q", rest[0])
	}
	if c.nodeName == "" {
		return cli.Failf("node: --node-name is required")
	}
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	lvl, err := logrus.ParseLevel(c.logLevel)
	if err != nil {
		return cli.Failf("node: --log-level %q: use debug, info, warn or error", c.logLevel)
	}
	log.SetLevel(lvl)
	root, err := node.V2Root(c.cgroupRoot)
	if err != nil {
		return cli.Failf("node: --cgroup-root: %v", err)
	}
	agent, err := node.NewAgent(node.AgentConfig{CgroupRoot: root, V1MemoryRoot: node.V1MemoryRoot(c.cgroupRoot), PinRoot: c.pinRoot, Logger: log})
	if err != nil {
		return cli.Failf("node: %v", err)
	}
	defer agent.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.WithFields(logrus.Fields{"node": c.nodeName, "cgroup_root": root, "pin_root": c.pinRoot}).Info("airlock node agent started")
	if err := kube.WatchNodePods(ctx, c.kubeconfig, c.nodeName, nodePods{agent}, log); err != nil {
		return &cli.ExitError{Code: 1, Msg: "node: " + cli.OneLineErr(err)}
	}
	log.Info("shutting down: every pod stays enforced")
	return nil
}

// nodePods adapts the agent to the pod watch.
type nodePods struct{ a *node.Agent }

func (n nodePods) Resync(pods []kube.NodePod) error {
	out := make([]node.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, node.Pod(p))
	}
	return n.a.Resync(out)
}

func (n nodePods) Upsert(p kube.NodePod) error { return n.a.Upsert(node.Pod(p)) }

func (n nodePods) Delete(namespace, name string) error {
	return n.a.Delete(node.Pod{Namespace: namespace, Name: name}.Sandbox())
}
