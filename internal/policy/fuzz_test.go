package policy

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

// FuzzSelector feeds arbitrary ranges, orders, patterns, extract templates and tags through
// NewSelector and Latest: they must not panic, and must agree with referenceLatest, which
// applies the same rules through Masterminds and regexp.ExpandString for every tag.
func FuzzSelector(f *testing.F) {
	f.Add(uint8(0), ">=1.0.0", "", "", "1.0.0\nv1.2.0\n1.2.0-rc.1\nlatest\nv1.2.0+b")
	f.Add(uint8(0), "~1.2 || >=4.0.0-0", "", "", "1.2.9\n1.3.0\n5.0.0-rc.1\n40.1.0\n1.20.0")
	f.Add(uint8(0), "1.2.3-rc.1 || >=2", `^app-(.*)$`, "$1", "app-1.2.3-rc.2\napp-v2.0.0\napp-2.0.0+b\nother")
	f.Add(uint8(1), "desc", `^(?P<d>\d{4})-`, "${d}", "2024-x\n2023-y\nlatest\n2023-z")
	f.Add(uint8(1), "aſc", "", "", "b\na")
	f.Add(uint8(2), "asc", `^main-[a-f0-9]+-(?P<ts>[0-9]+)`, "$ts", "main-abc-17\nmain-def-9\nv1")
	f.Add(uint8(2), "DESC", "", "", "1\n1.0\nNaN\n-0\n0x1p-2")
	f.Add(uint8(2), "", `(\d+)`, "$1.$1", "a1\nb22\nc")
	f.Add(uint8(3), "", "(", "", "")
	f.Add(uint8(4), "*", "", "", "1.0.0")
	f.Add(uint8(1), "", "", "", "v1\nsha256-"+strings.Repeat("a", 64)+".att\nsha256-"+strings.Repeat("b", 64))
	f.Add(uint8(2), "", `(\d+)`, "$1", "b1\nsha256-"+strings.Repeat("9", 64)+".sig")
	f.Fuzz(func(t *testing.T, kind uint8, arg, pattern, extract, tagList string) {
		// Bound the work per input. Masterminds refuses ranges over 512 bytes and RE2 runs in
		// time linear in pattern and tag, so these caps bound each evaluation.
		if len(arg) > 600 || len(pattern) > 256 || len(extract) > 64 || len(tagList) > 4096 {
			return
		}
		var tags []string
		if tagList != "" {
			tags = strings.SplitN(tagList, "\n", 64)
		}
		spec := fuzzSpec(kind, arg, pattern, extract)
		if got, want := selectorOutcome(spec, tags), referenceOutcome(spec, tags); got != want {
			js, _ := json.Marshal(spec)
			t.Fatalf("spec %s, tags %q: got %s, want %s", js, tags, got, want)
		}
	})
}

// fuzzSpec builds a spec from fuzz input: kind picks the policy (or none, or two) and whether
// an empty filterTags is present; arg is the range or the order.
func fuzzSpec(kind uint8, arg, pattern, extract string) v1.ImagePolicySpec {
	var spec v1.ImagePolicySpec
	switch kind % 5 {
	case 0:
		spec = semverSpec(arg)
	case 1:
		spec = alphabeticalSpec(arg)
	case 2:
		spec = numericalSpec(arg)
	case 3:
	default:
		spec = alphabeticalSpec(arg)
		spec.Policy.SemVer = &v1.SemVerPolicy{Range: arg}
	}
	if pattern != "" || extract != "" || kind&8 != 0 {
		spec.FilterTags = &v1.TagFilter{Pattern: pattern, Extract: extract}
	}
	return spec
}
