package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/sandbox/kube"
)

const sandboxUsage = `Usage: airlock-kube sandbox <create|list|delete> [flags] [args]

The Kubernetes sandbox backend; airlock runs these for "airlock sandbox create|list|delete
--backend kubernetes", whose --help describes them.
`

func sandboxCmd(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("sandbox", sandboxUsage, map[string]cli.RunFunc{
		"create": sandboxCreate, "list": sandboxList, "delete": sandboxDelete,
	}, args, stdout, stderr)
}

// backendFlag is --backend, which airlock-kube accepts only as kubernetes (the command lines of
// "airlock sandbox ... --backend kubernetes" work as they are).
func backendFlag(fs *cli.FlagSet) *string {
	return fs.String("backend", "kubernetes", "kubernetes (the only backend airlock-kube serves; local sandboxes are airlock's)")
}

func checkBackend(b string) error {
	if b != "kubernetes" {
		return cli.Failf("--backend %q: airlock-kube serves kubernetes only; local sandboxes are airlock's (airlock sandbox ...)", b)
	}
	return nil
}

func sandboxCreate(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox create", "airlock-kube sandbox create NAME --image IMAGE [--policy FILE] [flags]",
		"Create sandbox NAME as a pod labelled for sidecar injection (see airlock sandbox create --help).", stderr)
	backend := backendFlag(fs)
	policyFile := fs.String("policy", "", "policy YAML written to the pod's policy ConfigMap (validated first)")
	o := &cli.KubeCreate{}
	o.Register(fs)
	pos, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return cli.Failf("sandbox create: give exactly one NAME")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return kubeCreate(ctx, pos[0], *policyFile, o, stdout)
}

func sandboxList(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox list", "airlock-kube sandbox list [--namespace NS | --all-namespaces] [--json]",
		"List the sandbox pods (see airlock sandbox list --help).", stderr)
	backend := backendFlag(fs)
	var k cli.KubeCluster
	k.Register(fs)
	all := fs.Bool("all-namespaces", false, "list the sandboxes of every namespace")
	asJSON := fs.Bool("json", false, "print a JSON array with every field")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	return kubeList(context.Background(), &k, *all, *asJSON, stdout)
}

func sandboxDelete(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox delete", "airlock-kube sandbox delete [--namespace NS] NAME [NAME...]",
		"Delete sandbox pods and the policy ConfigMaps made for them (see airlock sandbox delete --help).", stderr)
	backend := backendFlag(fs)
	var k cli.KubeCluster
	k.Register(fs)
	names, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	if len(names) == 0 {
		fs.Usage()
		return cli.Failf("sandbox delete: give at least one NAME")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return kubeDelete(ctx, &k, names, stdout)
}

// connect opens the cluster the flags name.
func connect(k *cli.KubeCluster) (*kube.Cluster, error) {
	return kube.Connect(k.Kubeconfig, k.Context, k.Namespace)
}

// kubeCreate creates sandbox name as a pod labelled for sidecar injection, writing policyFile
// (when given, after validating it) into the pod's policy ConfigMap.
func kubeCreate(ctx context.Context, name, policyFile string, o *cli.KubeCreate, stdout io.Writer) error {
	if o.Image == "" {
		return cli.Failf("sandbox create %s --backend kubernetes: --image is required (the sandbox container's image)", name)
	}
	cluster, err := connect(&o.KubeCluster)
	if err != nil {
		return cli.Failf("sandbox create %s: %v", name, err)
	}
	return kubeCreateIn(ctx, cluster, name, policyFile, o, stdout)
}

// kubeCreateIn is kubeCreate on a connected cluster.
func kubeCreateIn(ctx context.Context, cluster *kube.Cluster, name, policyFile string, o *cli.KubeCreate, stdout io.Writer) error {
	co := kube.CreateOptions{
		Name: name, Namespace: cluster.Namespace, Image: o.Image, PolicyConfigMap: o.PolicyConfigMap,
		PolicyKey: o.PolicyKey, PolicyFile: policyFile, Environment: o.PodEnvironment, Identities: o.Identities,
	}
	if o.Containers != "" {
		co.Containers = strings.Split(o.Containers, ",")
	}
	if o.Command != "" {
		co.Command = []string{"sh", "-c", o.Command}
	}
	began := time.Now()
	fmt.Fprintf(stdout, "creating sandbox %s in namespace %s\n", name, cluster.Namespace)
	pod, err := kube.CreatePod(ctx, cluster.Client, co)
	if err != nil {
		return cli.Failf("sandbox create %s: %v", name, err)
	}
	if policyFile != "" {
		fmt.Fprintf(stdout, "policy %s written to ConfigMap %s/%s\n", policyFile, pod.Namespace, pod.Annotations[kube.AnnotationPolicy])
	}
	fmt.Fprintf(stdout, "created pod %s/%s (label %s=true: the airlock webhook injects the sidecar)\n", pod.Namespace, pod.Name, kube.LabelInject)
	if ids := pod.Annotations[kube.AnnotationIdentities]; ids != "" {
		fmt.Fprintf(stdout, "identities %s (annotation %s)\n", ids, kube.AnnotationIdentities)
	}
	if o.Wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, o.Wait)
		defer cancel()
		_, err := kube.WaitReady(wctx, cluster.Client, pod.Namespace, pod.Name, func(line string) {
			fmt.Fprintf(stdout, "  %5.1fs  %s\n", time.Since(began).Seconds(), line)
		})
		if err != nil {
			return cli.Failf("sandbox create %s: %v (the pod is kept: airlock sandbox delete --backend kubernetes %s)", name, err, name)
		}
	}
	fmt.Fprintf(stdout, `sandbox %[2]s ready in %[4]s
  status:  kubectl -n %[1]s get pod %[2]s
  enter:   kubectl -n %[1]s exec -it %[2]s -c %[5]s -- sh
  audit:   kubectl -n %[1]s logs %[2]s -c %[3]s
  remove:  airlock sandbox delete --backend kubernetes --namespace %[1]s %[2]s
`, pod.Namespace, pod.Name, kube.SidecarName, time.Since(began).Round(100*time.Millisecond), pod.Spec.Containers[0].Name)
	return nil
}

// kubeList prints the sandbox pods of the namespace (every namespace with all).
func kubeList(ctx context.Context, k *cli.KubeCluster, all, asJSON bool, stdout io.Writer) error {
	cluster, err := connect(k)
	if err != nil {
		return cli.Failf("sandbox list: %v", err)
	}
	ns := cluster.Namespace
	if all {
		ns = ""
	}
	list, err := kube.Sandboxes(ctx, cluster.Client, ns)
	if err != nil {
		return cli.Failf("sandbox list: %v", err)
	}
	if asJSON {
		return cli.WriteJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tAGE\tPHASE\tSIDECAR\tPOLICY\tNODE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, cli.Age(time.Since(s.Created)), s.Phase, s.Sidecar, s.Policy, s.Node)
	}
	return tw.Flush()
}

// kubeDelete deletes the named sandbox pods and the policy ConfigMaps made for them, printing
// each step; a sandbox that does not exist is not an error.
func kubeDelete(ctx context.Context, k *cli.KubeCluster, names []string, stdout io.Writer) error {
	cluster, err := connect(k)
	if err != nil {
		return cli.Failf("sandbox delete: %v", err)
	}
	var errs []string
	for _, name := range names {
		began := time.Now()
		err := kube.DeleteSandbox(ctx, cluster.Client, cluster.Namespace, name, func(line string) {
			fmt.Fprintf(stdout, "  %5.1fs  %s\n", time.Since(began).Seconds(), line)
		})
		switch {
		case errors.Is(err, kube.ErrNotFound):
			fmt.Fprintf(stdout, "sandbox %s/%s: not found (nothing to delete)\n", cluster.Namespace, name)
		case err != nil:
			errs = append(errs, err.Error())
		default:
			fmt.Fprintf(stdout, "sandbox %s/%s deleted in %s\n", cluster.Namespace, name, time.Since(began).Round(100*time.Millisecond))
		}
	}
	if len(errs) > 0 {
		return cli.Failf("sandbox delete: %s", strings.Join(errs, "; "))
	}
	return nil
}
