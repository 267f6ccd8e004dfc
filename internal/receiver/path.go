package receiver

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// hookPrefix is the path under which webhooks arrive.
const hookPrefix = "/hook/"

// route is a parsed webhook path: /hook/<provider> for the cluster receiver, or
// /hook/<provider>/<namespace> for a namespace's receiver.
type route struct {
	provider  string
	namespace string // "" for the cluster receiver
}

// receiverName names the receiver in logs and rate limits.
func (rt route) receiverName() string {
	if rt.namespace == "" {
		return "cluster"
	}
	return rt.namespace
}

// parseRoute parses a webhook path. It rejects anything that is not exactly one or two
// non-empty segments after /hook/, and a namespace that is not a DNS label, so that no path
// can name a receiver that does not exist.
func parseRoute(path string) (route, bool) {
	rest, ok := strings.CutPrefix(path, hookPrefix)
	if !ok || rest == "" {
		return route{}, false
	}
	provider, namespace, nested := strings.Cut(rest, "/")
	if provider == "" || len(provider) > 63 {
		return route{}, false
	}
	if !nested {
		return route{provider: provider}, true
	}
	if strings.Contains(namespace, "/") || len(validation.IsDNS1123Label(namespace)) > 0 {
		return route{}, false
	}
	return route{provider: provider, namespace: namespace}, true
}
