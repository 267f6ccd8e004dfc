package policy

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
)

func TestNumerical(t *testing.T) {
	builds := []string{"1", "10", "9", "2"}
	tests := []struct {
		name  string
		order string
		tags  []string
		want  string
	}{
		{"asc picks the greatest", v1.OrderAsc, builds, "10"},
		{"desc picks the least", v1.OrderDesc, builds, "1"},
		{"no order means asc", "", builds, "10"},
		{"the order is case-insensitive", "Desc", builds, "1"},
		{"decimals and negatives", v1.OrderAsc, []string{"1.5", "1.25", "-3", "1e0"}, "1.5"},
		{"decimals and negatives, desc", v1.OrderDesc, []string{"1.5", "1.25", "-3", "1e0"}, "-3"},
		{"anything strconv.ParseFloat reads", v1.OrderAsc, []string{"0x1p4", "1_5", "9"}, "0x1p4"},
		{"infinities", v1.OrderAsc, []string{"1e308", "+Inf"}, "+Inf"},
		{"tie: equal numbers, the greater tag wins", v1.OrderAsc, []string{"1", "1.0", "01"}, "1.0"},
		{"tie: also in desc", v1.OrderDesc, []string{"01", "1.0", "1", "2"}, "1.0"},
		{"tie: zero and negative zero", v1.OrderAsc, []string{"0", "-0"}, "0"},
		{"NaN is below every number", v1.OrderAsc, []string{"NaN", "-Inf"}, "-Inf"},
		{"so desc picks it", v1.OrderDesc, []string{"-Inf", "NaN", "1"}, "NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := latest(t, numericalSpec(tt.order), tt.tags)
			if err != nil || got != tt.want {
				t.Fatalf("Latest() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNumericalParseFailure(t *testing.T) {
	tests := []struct {
		name    string
		spec    v1.ImagePolicySpec
		tags    []string
		mention []string
	}{
		{"a tag that is not a number fails the evaluation",
			numericalSpec(""), []string{"1", "latest", "2"}, []string{`tag "latest"`}},
		{"the first such tag is named",
			numericalSpec(""), []string{"1", "x", "y"}, []string{`tag "x"`}},
		{"a number out of float64 range",
			numericalSpec(""), []string{"1e400"}, []string{`tag "1e400"`, "out of range"}},
		{"a v prefix is not a number",
			numericalSpec(""), []string{"v1"}, []string{`tag "v1"`}},
		{"an extracted value names the tag and the value",
			withFilter(numericalSpec(""), `^build-(.*)$`, "$1"), []string{"build-7", "build-x1"},
			[]string{`tag "build-x1"`, `value "x1"`}},
		{"an empty extracted value",
			withFilter(numericalSpec(""), `^build`, "$1"), []string{"build-7"}, []string{`tag "build-7"`, `value ""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := latest(t, tt.spec, tt.tags)
			if err == nil || errors.Is(err, ErrNoCandidates) || errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Latest() = %q, %v; want an evaluation error", got, err)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %s", err, m)
				}
			}
		})
	}
}
