// This file replaces knative.dev/pkg/version/version.go when hack/knative.sh builds Knative's
// programs. Knative refuses to start when the apiserver's version does not parse as semver; a
// kube-apiserver built from the module proxy (hack/testenv.sh) reports build metadata
// "+$Format:%H$", which is not semver. Build metadata has no say in precedence, so here it is
// dropped before the comparison. Everything else is as Knative documents it.

package version

import (
	"fmt"
	"os"
	"strings"

	"github.com/blang/semver/v4"
	"k8s.io/client-go/discovery"
)

const (
	// KubernetesMinVersionKey overrides the minimum Kubernetes version.
	KubernetesMinVersionKey = "KUBERNETES_MIN_VERSION"

	// DefaultKubernetesMinVersion is the minimum Kubernetes version, with a leading "v".
	DefaultKubernetesMinVersion = "v1.34.0"
)

// KubernetesMinimumVersion returns $KUBERNETES_MIN_VERSION, or DefaultKubernetesMinVersion.
func KubernetesMinimumVersion() string {
	if v := os.Getenv(KubernetesMinVersionKey); v != "" {
		return v
	}
	return DefaultKubernetesMinVersion
}

// CheckMinimumVersion returns an error when the apiserver is older than
// KubernetesMinimumVersion. Pre-releases of the minimum version pass unless the minimum names
// a pre-release itself.
func CheckMinimumVersion(versioner discovery.ServerVersionInterface) error {
	v, err := versioner.ServerVersion()
	if err != nil {
		return err
	}
	current, err := parse(v.GitVersion)
	if err != nil {
		return err
	}
	minimum, err := parse(KubernetesMinimumVersion())
	if err != nil {
		return err
	}
	if len(minimum.Pre) == 0 {
		minimum.Pre = []semver.PRVersion{{VersionNum: 0, IsNum: true}}
	}
	if current.LT(minimum) {
		return fmt.Errorf("kubernetes version %q is not compatible, need at least %q (this can be overridden with the env var %q)",
			current, minimum, KubernetesMinVersionKey)
	}
	return nil
}

// parse reads a version with or without its leading "v", ignoring build metadata.
func parse(v string) (semver.Version, error) {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexByte(v, '+'); i >= 0 {
		v = v[:i]
	}
	return semver.Make(v)
}
