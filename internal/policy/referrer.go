package policy

import "strings"

// IsReferrerTag tells whether tag names what signs, attests or describes another manifest rather
// than an image to deploy: "sha256-" and 64 lowercase hex digits (the digest of the manifest it
// refers to), alone (the OCI 1.1 referrers tag schema) or followed by a dot and anything
// (cosign's ".sig", ".att", ".sbom"). Such tags never become latest, whatever the policy.
func IsReferrerTag(tag string) bool {
	hex, ok := strings.CutPrefix(tag, "sha256-")
	if !ok || len(hex) < 64 {
		return false
	}
	for i := range 64 {
		if c := hex[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return len(hex) == 64 || hex[64] == '.'
}

// ReferredDigest returns the digest of the manifest that a referrer or attachment tag
// (IsReferrerTag) refers to, as sha256:<hex>, and false for any other tag.
func ReferredDigest(tag string) (string, bool) {
	if !IsReferrerTag(tag) {
		return "", false
	}
	return "sha256:" + tag[len("sha256-"):len("sha256-")+64], true
}
