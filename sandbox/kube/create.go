package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/airlock-dev/airlock/policy"
)

// CreateOptions describe a sandbox pod for CreatePod.
type CreateOptions struct {
	// Name of the pod (required, a DNS-1123 subdomain).
	Name string
	// Namespace of the pod and its policy ConfigMap; empty means "default".
	Namespace string
	// Image of the sandbox's (single) app container (required).
	Image string
	// Command of the app container; empty means ["sleep", "infinity"], a sandbox to
	// kubectl exec into.
	Command []string
	// PolicyConfigMap names the ConfigMap holding the policy; empty means "<Name>-policy".
	PolicyConfigMap string
	// PolicyKey is the ConfigMap key; empty means DefaultPolicyKey.
	PolicyKey string
	// PolicyFile, when set, is validated with policy.Load and written into the ConfigMap
	// (created, or its key updated); empty means the ConfigMap must already exist.
	PolicyFile string
	// Environment sets AnnotationEnvironment; empty leaves the webhook's default.
	Environment string
	// Containers names the pod's app containers, each running Image and Command (DNS-1123
	// labels, distinct, not SidecarName); empty means one, DefaultContainer.
	Containers []string
	// Identities sets AnnotationIdentities ("CONTAINER=IDENTITY,..."); empty means none. It
	// is checked before anything is created: its syntax and containers as the webhook checks
	// them, and its identities against the policy (PolicyFile, else the ConfigMap's).
	Identities string
}

// DefaultContainer is the name of a sandbox pod's app container when CreateOptions name none.
const DefaultContainer = "sandbox"

// CreatePod creates a pod labelled for injection (the webhook adds the sidecar when the API
// server admits it) and, with PolicyFile, its policy ConfigMap; it returns the pod as the API
// server stored it. An invalid policy file creates nothing.
func CreatePod(ctx context.Context, client API, o CreateOptions) (*corev1.Pod, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	pod := o.pod()
	var data []byte
	if o.PolicyFile != "" {
		var err error
		if data, err = policyData(o.PolicyFile); err != nil {
			return nil, err
		}
	}
	if err := o.checkIdentities(ctx, client, pod, data); err != nil {
		return nil, err
	}
	if o.PolicyFile != "" {
		if err := applyConfigMap(ctx, client, o, data); err != nil {
			return nil, err
		}
	}
	pod, err := client.CreatePod(ctx, pod)
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", o.Namespace, o.Name, err)
	}
	return pod, nil
}

func (o *CreateOptions) defaults() error {
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		return fmt.Errorf("sandbox name %q: %s", o.Name, errs[0])
	}
	// The name is also the pod's LabelSandbox, which sandbox list and delete select on.
	if errs := validation.IsValidLabelValue(o.Name); len(errs) > 0 {
		return fmt.Errorf("sandbox name %q: %s", o.Name, errs[0])
	}
	if o.Image == "" {
		return fmt.Errorf("sandbox %s: an image is required", o.Name)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if len(o.Command) == 0 {
		o.Command = []string{"sleep", "infinity"}
	}
	if o.PolicyConfigMap == "" {
		o.PolicyConfigMap = o.Name + "-policy"
	}
	if o.PolicyKey == "" {
		o.PolicyKey = DefaultPolicyKey
	}
	if errs := validation.IsConfigMapKey(o.PolicyKey); len(errs) > 0 {
		return fmt.Errorf("policy key %q: %s", o.PolicyKey, errs[0])
	}
	if o.Environment != "" {
		if _, ok := environments[o.Environment]; !ok {
			return fmt.Errorf("environment %q: use production, staging or development", o.Environment)
		}
	}
	return o.defaultContainers()
}

// defaultContainers fills and checks Containers.
func (o *CreateOptions) defaultContainers() error {
	if len(o.Containers) == 0 {
		o.Containers = []string{DefaultContainer}
	}
	for i, c := range o.Containers {
		switch {
		case len(validation.IsDNS1123Label(c)) > 0:
			return fmt.Errorf("container name %q: %s", c, validation.IsDNS1123Label(c)[0])
		case c == SidecarName:
			return fmt.Errorf("container name %q is reserved for the airlock sidecar", c)
		case slices.Contains(o.Containers[:i], c):
			return fmt.Errorf("container name %q is given twice", c)
		}
	}
	return nil
}

// checkIdentities checks Identities before anything is created: its syntax and containers
// with the webhook's own check on the pod about to be created, then that the policy defines
// every identity it names (policyFile's bytes when given, else the existing ConfigMap's), the
// error naming the file (or ConfigMap) and the line where spec.identities lacks it.
func (o *CreateOptions) checkIdentities(ctx context.Context, client API, pod *corev1.Pod, policyFile []byte) error {
	if o.Identities == "" {
		return nil
	}
	m, err := identitiesFor(pod)
	if err != nil {
		return fmt.Errorf("identities %q: %s", o.Identities, strings.TrimPrefix(err.Error(), ErrDenied.Error()+": "))
	}
	source, data := o.PolicyFile, policyFile
	if o.PolicyFile == "" {
		if source, data, err = configMapPolicy(ctx, client, o); err != nil {
			return fmt.Errorf("identities %q: %w", o.Identities, err)
		}
	}
	if _, err := policy.CheckIdentityMapSource(source, data, m); err != nil {
		return fmt.Errorf("identities %q: %w", o.Identities, err)
	}
	return nil
}

// configMapPolicy reads the policy of the existing ConfigMap the pod will name, and a name
// for it in errors.
func configMapPolicy(ctx context.Context, client API, o *CreateOptions) (string, []byte, error) {
	source := fmt.Sprintf("ConfigMap %s/%s/%s", o.Namespace, o.PolicyConfigMap, o.PolicyKey)
	cm, err := client.GetConfigMap(ctx, o.Namespace, o.PolicyConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil, fmt.Errorf("policy ConfigMap %s/%s does not exist, so the identities cannot be checked against its policy: give the policy file (--policy) or create the ConfigMap first", o.Namespace, o.PolicyConfigMap)
	case err != nil:
		return "", nil, fmt.Errorf("get policy ConfigMap %s/%s: %w", o.Namespace, o.PolicyConfigMap, err)
	}
	data, ok := cm.Data[o.PolicyKey]
	if !ok {
		return "", nil, fmt.Errorf("%s: no such key in the ConfigMap", source)
	}
	return source, []byte(data), nil
}

// policyData reads and validates a policy file for a ConfigMap. The ConfigMap carries one
// file, so a policy that extends other files is refused (built-in profiles are fine).
func policyData(file string) ([]byte, error) {
	if _, err := policy.Load(file); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	// Parsed again as if it stood alone in an empty directory: a file parent would not be
	// found there, as it will not be in the pod.
	alone := filepath.Join(string(filepath.Separator)+"nonexistent-airlock-configmap", filepath.Base(file))
	if _, err := policy.Parse(alone, data); err != nil {
		return nil, fmt.Errorf("policy %s extends other files, which a ConfigMap cannot carry (extend built-in profiles, or merge the parents in): %w", file, err)
	}
	return data, nil
}

// applyConfigMap creates the policy ConfigMap, or sets its key when it exists (other keys
// are kept).
func applyConfigMap(ctx context.Context, client API, o CreateOptions, data []byte) error {
	cm, err := client.GetConfigMap(ctx, o.Namespace, o.PolicyConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			// LabelSandbox: DeleteSandbox removes the ConfigMap it made along with the pod.
			ObjectMeta: metav1.ObjectMeta{Name: o.PolicyConfigMap, Namespace: o.Namespace, Labels: map[string]string{
				"app.kubernetes.io/managed-by": "airlock", LabelSandbox: o.Name,
			}},
			Data: map[string]string{o.PolicyKey: string(data)},
		}
		if _, err := client.CreateConfigMap(ctx, cm); err != nil {
			return fmt.Errorf("create policy ConfigMap %s/%s: %w", o.Namespace, o.PolicyConfigMap, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get policy ConfigMap %s/%s: %w", o.Namespace, o.PolicyConfigMap, err)
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[o.PolicyKey] = string(data)
	if _, err := client.UpdateConfigMap(ctx, cm); err != nil {
		return fmt.Errorf("update policy ConfigMap %s/%s: %w", o.Namespace, o.PolicyConfigMap, err)
	}
	return nil
}

// pod is the sandbox pod before injection.
func (o *CreateOptions) pod() *corev1.Pod {
	annotations := map[string]string{AnnotationPolicy: o.PolicyConfigMap}
	if o.PolicyKey != DefaultPolicyKey {
		annotations[AnnotationPolicyKey] = o.PolicyKey
	}
	if o.Environment != "" {
		annotations[AnnotationEnvironment] = o.Environment
	}
	if o.Identities != "" {
		annotations[AnnotationIdentities] = o.Identities
	}
	labels := map[string]string{LabelInject: "true", "app.kubernetes.io/managed-by": "airlock", LabelSandbox: o.Name}
	noToken, noEscalation := false, false
	containers := make([]corev1.Container, 0, len(o.Containers))
	for _, name := range o.Containers {
		containers = append(containers, corev1.Container{
			Name:    name,
			Image:   o.Image,
			Command: o.Command,
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &noEscalation,
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        o.Name,
			Namespace:   o.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			// The sandbox has no business with the Kubernetes API.
			AutomountServiceAccountToken: &noToken,
			RestartPolicy:                corev1.RestartPolicyNever,
			// Removed by the webhook when it injects the sidecar: without the webhook the
			// pod never runs.
			SchedulingGates: []corev1.PodSchedulingGate{{Name: SchedulingGate}},
			SecurityContext: sandboxPodSecurity(),
			Containers:      containers,
		},
	}
}

// sandboxUID is the user a sandbox pod runs as: not root, whatever the image says.
const sandboxUID = 65532

// sandboxPodSecurity is the sandbox pod's securityContext: what Pod Security "restricted"
// asks (sandbox namespaces enforce it, the injected sidecar fits it), with a fixed non-root
// user so that images whose default user is root still run.
func sandboxPodSecurity() *corev1.PodSecurityContext {
	yes, uid := true, int64(sandboxUID)
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   &yes,
		RunAsUser:      &uid,
		RunAsGroup:     &uid,
		FSGroup:        &uid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
