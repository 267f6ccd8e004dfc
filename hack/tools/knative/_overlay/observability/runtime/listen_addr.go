// This file is added to knative.dev/pkg/observability/runtime when hack/knative.sh builds Knative's programs.

package runtime

import (
	"net"
	"os"
)

// listenAddr is the address a server of this package listens on for port: on the host that
// KNATIVE_LISTEN_HOST names (127.0.0.1 in the tests), or on every interface when it is unset,
// as in Knative's own builds.
func listenAddr(port string) string {
	return net.JoinHostPort(os.Getenv("KNATIVE_LISTEN_HOST"), port)
}
