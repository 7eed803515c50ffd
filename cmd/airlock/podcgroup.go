package main

import (
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/ebpf"
)

// podConfig is pod mode: kernel enforcement on the pod's cgroup, the sidecar's own container
// cgroup exempt (the sidecar is a container of the pod it enforces).
type podConfig struct {
	enabled    bool
	cgroupRoot string
}

// podFlags registers --pod-cgroup and --cgroup-root. The Kubernetes webhook injects the
// sidecar with exactly `--pod-cgroup --cgroup-root /host/sys/fs/cgroup`.
func podFlags(fs *flagSet, c *runConfig) {
	fs.BoolVar(&c.pod.enabled, "pod-cgroup", false, "Kubernetes pod mode: attach kernel enforcement to the pod's cgroup (the parent of this container's cgroup), exempting this container's own cgroup; not with --cgroup")
	fs.StringVar(&c.pod.cgroupRoot, "cgroup-root", "", "where the host's cgroup v2 hierarchy is visible, e.g. a hostPath mount /host/sys/fs/cgroup (with --pod-cgroup); default: the cgroup2 mount of /proc/self/mountinfo")
}

// validatePod checks the pod mode flags.
func validatePod(c *runConfig) error {
	switch {
	case c.pod.enabled && c.cgroup != "":
		return failf("--pod-cgroup and --cgroup are mutually exclusive: --pod-cgroup finds the pod's cgroup itself")
	case !c.pod.enabled && c.pod.cgroupRoot != "":
		return failf("--cgroup-root is used only with --pod-cgroup")
	}
	return nil
}

// findPodCgroup finds the pod's cgroup and the sidecar's own, or refuses with one line.
func findPodCgroup(c *runConfig, log *logrus.Logger) (ebpf.PodCgroups, error) {
	pc, err := ebpf.FindPodCgroup(c.pod.cgroupRoot)
	if err != nil {
		return pc, failf("--pod-cgroup: cannot find this pod's cgroup: %s", oneLine(err))
	}
	if err := ebpf.CheckNodePinRoot(""); err != nil {
		return pc, failf("--pod-cgroup: %s", oneLine(err))
	}
	log.WithFields(logrus.Fields{"pod_cgroup": pc.Pod, "exempt_cgroup": pc.Self}).Info("pod mode: kernel enforcement goes on the pod's cgroup; this container's cgroup is exempt")
	if !strings.Contains(filepath.Base(pc.Pod), "pod") {
		// Kubelet names pod cgroups pod<UID> (cgroupfs) or kubepods-...-pod<UID>.slice
		// (systemd). Another name may mean the runtime put this process in a sub-cgroup of its
		// container's, and only this container is enforced.
		log.WithField("pod_cgroup", pc.Pod).Warn("pod mode: the parent of this container's cgroup is not named like a Kubernetes pod cgroup (pod<UID>); check that it holds the app containers")
	}
	// Pins of pods deleted from this node are nobody else's to remove.
	removed, err := ebpf.RemoveDefunct("")
	if len(removed) > 0 {
		log.WithField("sandboxes", removed).Info("pod mode: removed the pins of deleted pods")
	}
	if err != nil {
		log.WithField("error", oneLine(err)).Warn("pod mode: could not remove every deleted pod's pins")
	}
	return pc, nil
}
