package kube

// Labels and annotations on a pod that airlock reads or writes; they are the contract between
// the webhook, the manifests in deploy/ and the users who label their pods.
const (
	// LabelInject set to "true" on a pod asks for the sidecar (the MutatingWebhookConfiguration
	// selects on it, and the webhook checks it again).
	LabelInject = "airlock.dev/inject"
	// LabelSandbox carries the sandbox name on pods CreatePod makes (when it fits a label).
	LabelSandbox = "airlock.dev/sandbox"
	// AnnotationPolicy names the ConfigMap (in the pod's namespace) holding the policy.
	AnnotationPolicy = "airlock.dev/policy"
	// AnnotationPolicyKey names the key of that ConfigMap holding the policy YAML; default
	// DefaultPolicyKey.
	AnnotationPolicyKey = "airlock.dev/policy-key"
	// AnnotationEnvironment chooses the sidecar's --environment; it may be stricter than the
	// webhook's, never laxer.
	AnnotationEnvironment = "airlock.dev/environment"
	// AnnotationIdentities maps the pod's containers to identities of its policy's
	// spec.identities: "CONTAINER=IDENTITY,..." (policy.ParseIdentityMap). The webhook checks
	// it at admission and gives it to the sidecar (--identity-containers), whose arguments
	// no later change of the annotation reaches; the sidecar checks the identities against
	// the policy. A container not named is the sandbox's own policy.
	AnnotationIdentities = "airlock.dev/identities"
	// AnnotationInjected is written "true" on an injected pod (informational: whether a pod
	// is injected is decided by its sidecar container, so the annotation cannot be forged
	// into an opt-out).
	AnnotationInjected = "airlock.dev/injected"

	// AnnotationAuditClaim names a PersistentVolumeClaim (in the pod's namespace) that holds
	// the sidecar's audit trail instead of the default emptyDir: the trail then outlives
	// the pod on the node's or the storage's terms.
	AnnotationAuditClaim = "airlock.dev/audit-volume-claim"
	// AnnotationAuditCSIDriver names a CSI driver whose inline (ephemeral) volume holds the
	// audit trail instead of the emptyDir; AnnotationAuditCSIAttributes gives its
	// volumeAttributes as comma-separated key=value pairs. Not with AnnotationAuditClaim.
	AnnotationAuditCSIDriver     = "airlock.dev/audit-volume-csi-driver"
	AnnotationAuditCSIAttributes = "airlock.dev/audit-volume-csi-attributes"
	// AnnotationAuditKeySecret names a Secret (in the pod's namespace) whose key
	// "private.pem" is the Ed25519 key that signs the trail's checkpoints, mounted in the
	// sidecar alone. Without it the sidecar makes a key on its state volume (the pod holds
	// it): the fallback. docs/audit.md says which to choose.
	AnnotationAuditKeySecret = "airlock.dev/audit-signing-secret"
	// AnnotationAuditSigningTransit names a Vault Transit key, MOUNT/KEY (an ed25519 key),
	// that signs the trail's checkpoints (the sidecar's --audit-sign vault-transit:MOUNT/KEY):
	// the private key stays in Vault, the recommended setup. It needs the webhook's Vault
	// settings (the sidecar signs with its Kubernetes-auth login); not with
	// AnnotationAuditKeySecret.
	AnnotationAuditSigningTransit = "airlock.dev/audit-signing-vault-transit"

	// SchedulingGate on a pod keeps it from being scheduled until the webhook injects the
	// sidecar and removes the gate: a labelled pod created while the webhook is not
	// configured stays Pending (SchedulingGated) instead of running without its sidecar.
	SchedulingGate = "airlock.dev/sidecar"

	// DefaultPolicyKey is the ConfigMap key read when the pod has no AnnotationPolicyKey.
	DefaultPolicyKey = "policy.yaml"
)

// Names of what the webhook adds to a pod.
const (
	// SidecarName is the name of the injected native sidecar (an init container with
	// restartPolicy Always).
	SidecarName = "airlock"

	volumeCA     = "airlock-ca"     // emptyDir: the CA bundle, read-only in app containers
	volumeState  = "airlock-state"  // emptyDir: the sidecar's state (CA key), sidecar only
	volumePolicy = "airlock-policy" // the policy ConfigMap

	// CADir is where app containers find the CA bundle; CABundle is the bundle itself
	// (system roots followed by the sidecar's interception CA).
	CADir    = "/etc/airlock/ca"
	CABundle = CADir + "/ca-bundle.pem"

	policyDir = "/etc/airlock/policy"
	stateDir  = "/var/lib/airlock"
)
