package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/imagereflector/reflector/internal/kube"
)

func TestParseFlags(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want config
	}{{
		name: "defaults and the environment",
		env:  map[string]string{"K_SINK": "http://broker/", "REFLECTOR_STORE_DIR": "/data/tags"},
		want: config{every: time.Minute, scanURL: "http://broker/", policyURL: "http://broker/",
			concurrency: 8, spread: 20 * time.Second, pageSize: kube.DefaultPageSize, timeout: 50 * time.Second,
			storeDir: "/data/tags", storeEvery: 10 * time.Minute, metricsAddr: ":9095"},
	}, {
		name: "flags win over the environment",
		args: []string{"--once", "--every=5m", "--scan-url=http://scan/", "--policy-url=http://policy/",
			"--kubeconfig=/kc", "--concurrency=2", "--spread=1s", "--page-size=50", "--timeout=10s",
			"--store-dir=", "--store-every=0", "--metrics-addr=",
			"--scan-token-file=/var/run/secrets/scan/token", "--policy-token-file=/var/run/secrets/policy/token"},
		env: map[string]string{"K_SINK": "http://broker/", "REFLECTOR_STORE_DIR": "/data/tags"},
		want: config{once: true, every: 5 * time.Minute, scanURL: "http://scan/", policyURL: "http://policy/",
			scanTokenFile: "/var/run/secrets/scan/token", policyTokenFile: "/var/run/secrets/policy/token",
			kubeconfig: "/kc", concurrency: 2, spread: time.Second, pageSize: 50, timeout: 10 * time.Second},
	}, {
		name: "one URL from the flag, the other from K_SINK",
		args: []string{"--scan-url=http://scan/"},
		env:  map[string]string{"K_SINK": "http://broker/"},
		want: config{every: time.Minute, scanURL: "http://scan/", policyURL: "http://broker/",
			concurrency: 8, spread: 20 * time.Second, pageSize: kube.DefaultPageSize, timeout: 50 * time.Second,
			storeEvery: 10 * time.Minute, metricsAddr: ":9095"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseFlagsBadValueAndHelp(t *testing.T) {
	if _, err := parseFlags([]string{"--every=soon"}, func(string) string { return "" }); err == nil {
		t.Error("--every=soon parsed")
	}
	if _, err := parseFlags([]string{"--help"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestRunNeedsBothURLs(t *testing.T) {
	cfg, err := parseFlags([]string{"--scan-url=http://scan/"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := run(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "--policy-url") {
		t.Errorf("run without a policy URL: %v", err)
	}
}
