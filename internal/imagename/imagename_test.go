package imagename

import "testing"

func TestCanonical(t *testing.T) {
	tests := []struct {
		image, want, err string
		insecure         bool
	}{
		{image: "alpine", want: "index.docker.io/library/alpine"},
		{image: "fluxcd/flux", want: "index.docker.io/fluxcd/flux"},
		{image: "docker.io/library/alpine", want: "index.docker.io/library/alpine"},
		{image: "ghcr.io/org/app", want: "ghcr.io/org/app"},
		{image: "localhost:5000/app", want: "localhost:5000/app"},
		{image: "127.0.0.1:5000/team/app", insecure: true, want: "127.0.0.1:5000/team/app"},
		{image: "https://ghcr.io/org/app", err: ".spec.image value should not start with URL scheme; remove 'https://'"},
		{image: "ghcr.io/org/app:v1", err: ".spec.image value should not contain a tag; remove ':v1'"},
		{image: "localhost:5000/app:v1", err: ".spec.image value should not contain a tag; remove ':v1'"},
		{image: "alpine@sha256:0000000000000000000000000000000000000000000000000000000000000000", err: ".spec.image value should not contain a digest; remove '@sha256:0000000000000000000000000000000000000000000000000000000000000000'"},
		{image: "Bad Name", err: `.spec.image value is not a valid image repository: could not parse reference: Bad Name`},
	}
	for _, tt := range tests {
		got, err := Canonical(tt.image, tt.insecure)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("Canonical(%q) error = %v, want %q", tt.image, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", tt.image, got, err, tt.want)
		}
	}
}

func TestKey(t *testing.T) {
	same := [][]string{
		{"index.docker.io", "library/alpine"},
		{"docker.io", "alpine"},
		{"registry-1.docker.io", "Library/Alpine"},
		{"", "alpine"},
	}
	for _, hr := range same {
		if got := Key(hr[0], hr[1]); got != "docker.io/library/alpine" {
			t.Errorf("Key(%q, %q) = %q", hr[0], hr[1], got)
		}
	}
	if got := Key("GHCR.io", "/Org/App/"); got != "ghcr.io/org/app" {
		t.Errorf("Key = %q", got)
	}
	if got := Key("localhost:5000", "app"); got != "localhost:5000/app" {
		t.Errorf("Key = %q, a registry other than Docker Hub gets no library/ prefix", got)
	}
	for image, want := range map[string]string{
		"alpine":                      "docker.io/library/alpine",
		"index.docker.io/fluxcd/flux": "docker.io/fluxcd/flux",
		"ghcr.io/Org/App:v1":          "ghcr.io/org/app",
		"localhost:5000/app@sha256:" + "0000000000000000000000000000000000000000000000000000000000000000": "localhost:5000/app",
	} {
		got, err := KeyOf(image)
		if err != nil || got != want {
			t.Errorf("KeyOf(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	if _, err := KeyOf("not a name"); err == nil {
		t.Error("KeyOf accepted an invalid name")
	}
}
