package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/imagename"
	"github.com/imagereflector/reflector/internal/store"
)

// RepositoryIdentity returns the identity that a tag list of repo, as it is now, is stored
// under: its UID, its canonical image and a hash of the rest of the spec that decides which
// tags are listed. A scan writes it with the tags; an evaluation uses only tags of the identity
// of the repository it reads, so that a recreated or edited repository is never served a list
// taken for what it was before. The error is that of an invalid spec.image.
func RepositoryIdentity(repo *v1.ImageRepository) (store.Identity, error) {
	canonical, err := imagename.Canonical(repo.Spec.Image, repo.Spec.Insecure)
	if err != nil {
		return store.Identity{}, err
	}
	return store.Identity{UID: string(repo.UID), Image: canonical, Listing: listingHash(repo)}, nil
}

// listingHash hashes what besides the image decides the stored list: the exclusion list in
// effect, and spec.insecure, which picks the scheme and so the server that answers.
// Credentials, proxy and TLS settings decide whether a listing succeeds, not what it holds.
func listingHash(repo *v1.ImageRepository) string {
	// Marshalling strings and a bool cannot fail.
	b, _ := json.Marshal(struct {
		Exclusions []string `json:"exclusions"`
		Insecure   bool     `json:"insecure"`
	}{repo.GetExclusionList(), repo.Spec.Insecure})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
