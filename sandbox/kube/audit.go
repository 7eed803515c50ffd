package kube

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// AuditOptions give every injected sidecar a durable, chained audit trail: the log and its
// signed checkpoints on a volume that survives a container restart (an emptyDir with a size
// limit, or a PVC by annotation), rotated so that sealed files can be shipped, and, with a
// bucket, shipped to S3-compatible storage. The zero value keeps the trail in the pod
// (256Mi emptyDir) and ships nothing.
type AuditOptions struct {
	// SizeLimit is the audit emptyDir's sizeLimit; zero means 256Mi. The shipping backlog
	// is bounded at three quarters of it, so that the kubelet never evicts the pod (and
	// the trail with it) for a full volume.
	SizeLimit resource.Quantity
	// MaxBytes and MaxAge seal (rotate) the log; zero means 4 MiB and 5 minutes: the
	// most a pod deleted without its grace period can lose from the bucket's view.
	MaxBytes int64
	MaxAge   time.Duration
	// S3Bucket, when set, ships the sealed files there, under S3Prefix, in S3Region, at
	// S3Endpoint (empty: AWS).
	S3Bucket, S3Prefix, S3Region, S3Endpoint string
	// S3CredentialsSecret names a Secret in each sandbox namespace whose key "credentials"
	// is ACCESS_KEY_ID:SECRET_ACCESS_KEY, mounted in the sidecar alone; S3CredentialsVault
	// is a Vault KV path (fields access_key_id, secret_access_key) read with the Vault
	// login. One of the two with S3Bucket.
	S3CredentialsSecret, S3CredentialsVault string
	// RetentionMode (COMPLIANCE or GOVERNANCE) and Retention ask for Object Lock
	// retention on every upload.
	RetentionMode string
	Retention     time.Duration
	// FailClosed turns the sidecar not-ready while its shipping backlog is full, instead
	// of dropping the oldest unshipped sealed file.
	FailClosed bool
}

// Names and paths of the audit volumes in the sidecar.
const (
	volumeAudit      = "airlock-audit"       // the log and checkpoints: emptyDir or the annotated PVC, sidecar only
	volumeAuditKey   = "airlock-audit-key"   // the annotated signing-key Secret, sidecar only
	volumeAuditCreds = "airlock-audit-creds" // S3CredentialsSecret, sidecar only
	auditDir         = "/var/log/airlock"
	auditKeyDir      = "/etc/airlock/audit-key"
	auditCredsDir    = "/etc/airlock/audit-s3"

	// AuditKeySecretKey is the key of the signing Secret holding the PKCS #8 PEM private
	// key (airlock audit keygen writes one).
	AuditKeySecretKey = "private.pem"
)

func (a *AuditOptions) validate(vaultAddr string) error {
	if a.SizeLimit.IsZero() {
		a.SizeLimit = resource.MustParse("256Mi")
	}
	if a.MaxBytes == 0 {
		a.MaxBytes = 4 << 20
	}
	if a.MaxAge == 0 {
		a.MaxAge = 5 * time.Minute
	}
	switch {
	case a.SizeLimit.Value() < 4*a.MaxBytes:
		return invalidf("audit volume size limit %s: give at least four rotations (%d bytes each)", a.SizeLimit.String(), a.MaxBytes)
	case a.MaxBytes < 0 || a.MaxAge < 0 || a.Retention < 0:
		return invalidf("audit rotation and retention must not be negative")
	case a.S3Bucket == "" && (a.S3CredentialsSecret != "" || a.S3CredentialsVault != "" || a.RetentionMode != ""):
		return invalidf("audit S3 settings without --audit-s3-bucket")
	case a.S3Bucket != "" && (a.S3CredentialsSecret == "") == (a.S3CredentialsVault == ""):
		return invalidf("--audit-s3-bucket needs one of --audit-s3-credentials-secret and --audit-s3-credentials-vault")
	case a.S3CredentialsVault != "" && vaultAddr == "":
		return invalidf("--audit-s3-credentials-vault needs --vault-addr")
	case a.RetentionMode != "" && a.RetentionMode != "COMPLIANCE" && a.RetentionMode != "GOVERNANCE":
		return invalidf("audit retention mode %q: use COMPLIANCE or GOVERNANCE", a.RetentionMode)
	case (a.RetentionMode == "") != (a.Retention == 0):
		return invalidf("--audit-retention-mode and --audit-retention go together")
	}
	if a.S3CredentialsSecret != "" {
		if errs := validation.IsDNS1123Subdomain(a.S3CredentialsSecret); len(errs) > 0 {
			return invalidf("audit S3 credentials Secret %q: %s", a.S3CredentialsSecret, errs[0])
		}
	}
	return nil
}

// auditSettings are what a pod's annotations choose for its trail.
type auditSettings struct {
	claim     string            // AnnotationAuditClaim: a PVC instead of the emptyDir
	csiDriver string            // AnnotationAuditCSIDriver: an inline CSI volume instead
	csiAttrs  map[string]string // AnnotationAuditCSIAttributes
	keySecret string            // AnnotationAuditKeySecret: the signing key's Secret
	transit   string            // AnnotationAuditSigningTransit: MOUNT/KEY of a Vault Transit key
}

// transitRef is a Vault Transit key's MOUNT/KEY: path segments of Vault's name characters.
var transitRef = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$`)

// auditSettingsFor reads and checks the pod's audit annotations.
func auditSettingsFor(pod *corev1.Pod) (auditSettings, error) {
	s := auditSettings{claim: pod.Annotations[AnnotationAuditClaim], keySecret: pod.Annotations[AnnotationAuditKeySecret],
		csiDriver: pod.Annotations[AnnotationAuditCSIDriver]}
	for ann, v := range map[string]string{AnnotationAuditClaim: s.claim, AnnotationAuditKeySecret: s.keySecret, AnnotationAuditCSIDriver: s.csiDriver} {
		if v == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return s, deniedf("annotation %s %q is not a resource name: %s", ann, v, errs[0])
		}
	}
	s.transit = pod.Annotations[AnnotationAuditSigningTransit]
	attrs := pod.Annotations[AnnotationAuditCSIAttributes]
	switch {
	case s.transit != "" && (!transitRef.MatchString(s.transit) || strings.Contains("/"+s.transit+"/", "/../") || strings.Contains("/"+s.transit+"/", "/./")):
		return s, deniedf("annotation %s %q: want MOUNT/KEY of a Vault Transit key, e.g. transit/airlock-audit", AnnotationAuditSigningTransit, s.transit)
	case s.transit != "" && s.keySecret != "":
		return s, deniedf("annotations %s and %s are exclusive: checkpoints have one signer", AnnotationAuditSigningTransit, AnnotationAuditKeySecret)
	case s.claim != "" && s.csiDriver != "":
		return s, deniedf("annotations %s and %s are exclusive: the trail has one volume", AnnotationAuditClaim, AnnotationAuditCSIDriver)
	case attrs != "" && s.csiDriver == "":
		return s, deniedf("annotation %s needs %s", AnnotationAuditCSIAttributes, AnnotationAuditCSIDriver)
	case attrs != "":
		s.csiAttrs = map[string]string{}
		for _, kv := range strings.Split(attrs, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || k == "" {
				return s, deniedf("annotation %s %q: want key=value[,key=value]", AnnotationAuditCSIAttributes, attrs)
			}
			s.csiAttrs[k] = v
		}
	}
	return s, nil
}

// args are the sidecar's audit flags.
func (a *AuditOptions) args(s auditSettings) []string {
	out := []string{
		"--audit-log", path.Join(auditDir, "audit.log"),
		"--audit-max-bytes", strconv.FormatInt(a.MaxBytes, 10),
		"--audit-max-age", a.MaxAge.String(),
	}
	if s.keySecret != "" {
		out = append(out, "--audit-key", path.Join(auditKeyDir, AuditKeySecretKey))
	}
	if s.transit != "" {
		out = append(out, "--audit-sign", "vault-transit:"+s.transit)
	}
	if a.S3Bucket == "" {
		return out
	}
	out = append(out,
		"--audit-ship-s3-bucket", a.S3Bucket,
		"--audit-ship-s3-region", a.s3Region(),
		// A re-created pod of the same name has another UID: its chain never lands where
		// an earlier one's did.
		"--audit-ship-key-prefix", "$(POD_NAMESPACE)/$(POD_NAME)/$(POD_UID)",
		"--audit-ship-backlog", strconv.FormatInt(a.SizeLimit.Value()/4*3, 10),
	)
	for _, kv := range [][2]string{{"--audit-ship-s3-prefix", a.S3Prefix}, {"--audit-ship-s3-endpoint", a.S3Endpoint},
		{"--audit-ship-s3-credentials-vault", a.S3CredentialsVault}, {"--audit-ship-retention-mode", a.RetentionMode}} {
		if kv[1] != "" {
			out = append(out, kv[0], kv[1])
		}
	}
	if a.S3CredentialsSecret != "" {
		out = append(out, "--audit-ship-s3-credentials-file", path.Join(auditCredsDir, "credentials"))
	}
	if a.Retention > 0 {
		out = append(out, "--audit-ship-retention", a.Retention.String())
	}
	if a.FailClosed {
		out = append(out, "--audit-ship-fail-closed")
	}
	return out
}

func (a *AuditOptions) s3Region() string {
	if a.S3Region == "" {
		return "us-east-1"
	}
	return a.S3Region
}

// volumes are the audit volumes of the pod.
func (a *AuditOptions) volumes(s auditSettings) []corev1.Volume {
	// Secret volume files belong to root: the sidecar (uid 65532) reads them only with the
	// read bit for others. Only the sidecar mounts these volumes (checkPod refuses an app
	// container that does), so no other container's user can read them.
	readable := int32(0o444)
	size := a.SizeLimit
	vol := corev1.Volume{Name: volumeAudit, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}}
	switch {
	case s.claim != "":
		vol.VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.claim}}
	case s.csiDriver != "":
		vol.VolumeSource = corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: s.csiDriver, VolumeAttributes: s.csiAttrs}}
	}
	out := []corev1.Volume{vol}
	secret := func(name, secretName, key string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secretName, Items: []corev1.KeyToPath{{Key: key, Path: key}}, DefaultMode: &readable,
		}}}
	}
	if s.keySecret != "" {
		out = append(out, secret(volumeAuditKey, s.keySecret, AuditKeySecretKey))
	}
	if a.S3Bucket != "" && a.S3CredentialsSecret != "" {
		out = append(out, secret(volumeAuditCreds, a.S3CredentialsSecret, "credentials"))
	}
	return out
}

// mounts are the sidecar's mounts of the audit volumes.
func (a *AuditOptions) mounts(s auditSettings) []corev1.VolumeMount {
	dirs := map[string]string{volumeAudit: auditDir, volumeAuditKey: auditKeyDir, volumeAuditCreds: auditCredsDir}
	var out []corev1.VolumeMount
	for _, v := range a.volumes(s) {
		out = append(out, corev1.VolumeMount{Name: v.Name, MountPath: dirs[v.Name], ReadOnly: v.Name != volumeAudit})
	}
	return out
}

// checkPod refuses a pod whose app containers reach for the signing key's Secret, the S3
// credentials' Secret or the audit PVC: the sandbox must be able neither to sign a forged
// checkpoint nor to rewrite its own trail.
func (a *AuditOptions) checkPod(pod *corev1.Pod, s auditSettings) error {
	if err := refuseSecret(pod, s.keySecret, volumeAuditKey, "the audit signing key"); err != nil {
		return err
	}
	if a.S3Bucket != "" {
		if err := refuseSecret(pod, a.S3CredentialsSecret, volumeAuditCreds, "the audit bucket's credentials"); err != nil {
			return err
		}
	}
	if s.claim == "" {
		return nil
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == s.claim && vol.Name != volumeAudit {
			return deniedf("volume %q mounts PVC %q, the audit trail's volume, which only the airlock sidecar may mount", vol.Name, s.claim)
		}
	}
	return nil
}

// refuseSecret refuses a pod that reaches for Secret name other than through the sidecar's
// own volume ours: a volume, a projected source, env or envFrom.
func refuseSecret(pod *corev1.Pod, name, ours, what string) error {
	if name == "" {
		return nil
	}
	refuse := func(who string) error {
		return deniedf("%s reads Secret %q, %s, which only the airlock sidecar may hold", who, name, what)
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.Secret != nil && vol.Secret.SecretName == name && vol.Name != ours {
			return refuse(fmt.Sprintf("volume %q", vol.Name))
		}
		if vol.Projected != nil {
			for _, src := range vol.Projected.Sources {
				if src.Secret != nil && src.Secret.Name == name {
					return refuse(fmt.Sprintf("volume %q", vol.Name))
				}
			}
		}
	}
	for _, c := range appContainers(pod) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name {
				return refuse(fmt.Sprintf("container %q", c.Name))
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil && ef.SecretRef.Name == name {
				return refuse(fmt.Sprintf("container %q", c.Name))
			}
		}
	}
	return nil
}

// QuantityFlag is a flag.Value that parses a Kubernetes quantity ("256Mi") into q, so that
// cmd/airlock-kube sets AuditOptions.SizeLimit without importing the Kubernetes libraries.
func QuantityFlag(q *resource.Quantity) interface {
	String() string
	Set(string) error
} {
	return quantityFlag{q}
}

type quantityFlag struct{ q *resource.Quantity }

func (f quantityFlag) String() string {
	if f.q == nil || f.q.IsZero() {
		return "256Mi"
	}
	return f.q.String()
}

func (f quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a quantity such as 256Mi", s)
	}
	*f.q = q
	return nil
}
