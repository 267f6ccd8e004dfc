package policy

import (
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

func TestAlphabetical(t *testing.T) {
	releases := []string{"RELEASE.2023-01-31T08-42-01Z", "RELEASE.2024-05-01T00-00-00Z", "RELEASE.2023-12-24T10-00-00Z"}
	tests := []struct {
		name  string
		order string
		tags  []string
		want  string
	}{
		{"asc picks the greatest", v1.OrderAsc, releases, "RELEASE.2024-05-01T00-00-00Z"},
		{"desc picks the least", v1.OrderDesc, releases, "RELEASE.2023-01-31T08-42-01Z"},
		{"no order means asc", "", releases, "RELEASE.2024-05-01T00-00-00Z"},
		{"the order is case-insensitive", "DESC", releases, "RELEASE.2023-01-31T08-42-01Z"},
		{"mixed case order", "Asc", releases, "RELEASE.2024-05-01T00-00-00Z"},
		{"byte-wise: lower case after upper case", v1.OrderAsc, []string{"b", "B", "a", "Z"}, "b"},
		{"byte-wise: upper case before lower case", v1.OrderDesc, []string{"b", "B", "a", "Z"}, "B"},
		{"byte-wise, not numeric", v1.OrderAsc, []string{"9", "10", "100"}, "9"},
		{"a prefix is before its extensions", v1.OrderDesc, []string{"ab", "a", "abc"}, "a"},
		{"bytes above ASCII are greatest", v1.OrderAsc, []string{"z", "é", "~"}, "é"},
		{"duplicates", v1.OrderAsc, []string{"a", "a"}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := latest(t, alphabeticalSpec(tt.order), tt.tags)
			if err != nil || got != tt.want {
				t.Fatalf("Latest() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
