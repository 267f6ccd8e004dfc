package webhook

import (
	"net/url"
	"strings"
)

// reference is an image reference split into its parts, not yet canonical.
type reference struct {
	host, repository, tag, digest string
}

// splitRef splits host/path[:tag][@digest]. A URL scheme is dropped. When registry is true the
// first component is always the host, as in the references registries send about themselves;
// otherwise Docker's rule applies and a first component without '.' or ':' that is not
// localhost is part of a Docker Hub repository path.
func splitRef(s string, registry bool) (reference, error) {
	var r reference
	s = strings.TrimSpace(s)
	if _, rest, ok := strings.Cut(s, "://"); ok {
		s = rest
	}
	if name, digest, ok := strings.Cut(s, "@"); ok {
		s, r.digest = name, digest
	}
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		s, r.tag = s[:i], s[i+1:]
	}
	first, rest, ok := strings.Cut(s, "/")
	switch {
	case registry && (!ok || first == ""):
		return r, malformed("reference %s does not start with a registry host", quote(s))
	case registry, ok && (strings.ContainsAny(first, ".:") || first == "localhost"):
		r.host, r.repository = first, rest
	default:
		r.repository = s
	}
	if r.repository == "" {
		return r, malformed("reference %s has no repository", quote(s))
	}
	return r, nil
}

// hostParam reads the ?host= parameter that names the registry of a source whose payload does
// not: "host[:port][/path/prefix]". The prefix, if any, is prepended to repository paths.
func hostParam(q url.Values) (host, prefix string) {
	v := strings.TrimSpace(q.Get("host"))
	if _, rest, ok := strings.Cut(v, "://"); ok {
		v = rest
	}
	host, prefix, _ = strings.Cut(v, "/")
	return host, strings.Trim(prefix, "/")
}

// joinPath joins repository path segments, skipping empty ones.
func joinPath(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		p = strings.Trim(p, "/")
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(p)
	}
	return b.String()
}

// urlHost returns the host[:port] of an absolute URL or of a bare host name with a path.
func urlHost(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}
