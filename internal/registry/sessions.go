package registry

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// A session is the authenticated transport of a repository: go-containerregistry's, which knows
// the registry's scheme and challenge from its ping and holds the bearer token it fetched. Scans
// of the same repository with the same credentials reuse it for a while, so that a push costs
// the registry one HEAD instead of a ping, a token request and a HEAD. The bearer transport
// fetches a new token by itself when the registry refuses an expired one.
const (
	// DefaultSessionTTL is how long a session is reused after it was opened.
	DefaultSessionTTL = 5 * time.Minute
	// maxSessions bounds the sessions kept; the oldest goes first.
	maxSessions = 1024
)

type session struct {
	rt      http.RoundTripper
	expires time.Time
}

// sessions keeps sessions by sessionKey.
type sessions struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[[sha256.Size]byte]session
}

// sessionKey identifies what a session may be reused for: the repository (the token's scope),
// the registry's scheme and the credentials, by hash, so that new credentials open a new session
// and none is kept in clear in the key.
func sessionKey(ctx context.Context, repo name.Repository, auth authn.Authenticator) ([sha256.Size]byte, error) {
	cfg, err := authn.Authorization(ctx, auth)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	b, err := json.Marshal(struct {
		Scheme, Repository string
		Auth               *authn.AuthConfig
	}{repo.Scheme(), repo.Name(), cfg})
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// get returns the live session of key, if any.
func (s *sessions) get(key [sha256.Size]byte, now time.Time) (http.RoundTripper, bool) {
	if s == nil || s.ttl <= 0 {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || !now.Before(e.expires) {
		delete(s.m, key)
		return nil, false
	}
	return e.rt, true
}

// put keeps rt as the session of key, dropping expired sessions and, when full, the oldest.
func (s *sessions) put(key [sha256.Size]byte, rt http.RoundTripper, now time.Time) {
	if s == nil || s.ttl <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[[sha256.Size]byte]session{}
	}
	if len(s.m) >= maxSessions {
		var oldest [sha256.Size]byte
		first := true
		for k, e := range s.m {
			if !now.Before(e.expires) {
				delete(s.m, k)
				continue
			}
			if first || e.expires.Before(s.m[oldest].expires) {
				oldest, first = k, false
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, oldest)
		}
	}
	s.m[key] = session{rt: rt, expires: now.Add(s.ttl)}
}

// drop forgets the session of key after a failure that may be the session's: refused
// credentials, a registry that moved or does not answer. A missing tag is not such a failure.
func (s *sessions) drop(key [sha256.Size]byte, err error) {
	if s == nil {
		return
	}
	if NotFound(err) {
		return
	}
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}
