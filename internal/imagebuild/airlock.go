package imagebuild

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Where the airlock image keeps things, and who it runs as.
const (
	// AirlockBinary is cmd/airlock: the sidecar, and the image's entrypoint.
	AirlockBinary = "/usr/local/bin/airlock"
	// AirlockKubeBinary is cmd/airlock-kube: the webhook and the node agent, and
	// what AirlockBinary runs for them; next to it, where it looks first.
	AirlockKubeBinary = "/usr/local/bin/airlock-kube"
	CABundle          = "/etc/ssl/certs/ca-certificates.crt"
	// CABundleSource is the committed bundle (relative to the repository root); its origin
	// is stated in deploy/image/README.md. The build host's own /etc/ssl is never read.
	CABundleSource = "deploy/image/ca-certificates.crt"
	NonRootUID     = 65532
)

// The commands airlock's image holds (relative to the repository root).
const (
	AirlockPackage     = "./cmd/airlock"
	AirlockKubePackage = "./cmd/airlock-kube"
)

// AirlockSpec describes airlock's image: the static airlock binaries built from the repository
// at root (cmd/airlock, the sidecar, and cmd/airlock-kube), the pinned CA bundle, and a non-root user
// (uid and gid 65532, "nonroot").
func AirlockSpec(root, arch string, created time.Time) (Spec, error) {
	bins, err := GoBinaries(root, arch, nil, AirlockPackage, AirlockKubePackage)
	if err != nil {
		return Spec{}, err
	}
	return AirlockSpecFrom(root, bins, arch, created)
}

// AirlockSpecFrom is AirlockSpec with the binaries already built (GoBinaries, by package:
// AirlockPackage and AirlockKubePackage), for a caller that builds more in the same go build.
func AirlockSpecFrom(root string, bins map[string][]byte, arch string, created time.Time) (Spec, error) {
	bin, kubeBin := bins[AirlockPackage], bins[AirlockKubePackage]
	if len(bin) == 0 || len(kubeBin) == 0 {
		return Spec{}, fmt.Errorf("airlock image: the binaries of %s and %s are both needed", AirlockPackage, AirlockKubePackage)
	}
	cas, err := os.ReadFile(filepath.Join(root, CABundleSource))
	if err != nil {
		return Spec{}, fmt.Errorf("read CA bundle: %w", err)
	}
	uid := fmt.Sprint(NonRootUID)
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + uid + ":nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:" + uid + ":\n"
	return Spec{
		Files: []File{
			{Path: AirlockBinary, Mode: 0o755, Data: bin},
			{Path: AirlockKubeBinary, Mode: 0o755, Data: kubeBin},
			{Path: CABundle, Mode: 0o644, Data: cas},
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
			{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
		},
		Entrypoint: []string{AirlockBinary},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=" + CABundle,
		},
		User:    uid + ":" + uid,
		Labels:  map[string]string{"org.opencontainers.image.source": "https://github.com/airlock-dev/airlock"},
		Arch:    arch,
		Created: created,
	}, nil
}
