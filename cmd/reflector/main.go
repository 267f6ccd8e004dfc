// Command reflector is reflector's command line. Its one subcommand, check, tells whether a
// cluster can run reflector, as `flux check --pre` does for Flux:
//
//	reflector check [--pre] [--allow-http] [--ca-file=FILE] [--kubeconfig=FILE] [--context=NAME] [--timeout=DURATION]
//
// It prints one line per check (internal/preflight), and under each failure the command that
// fixes it, and exits with 1 when a check failed, 2 on a usage error or when the cluster
// could not be read. --pre checks only the prerequisites, before the install; without it the
// installed Broker, tag store claim and public webhook route are checked too, the route with a
// GET of its /healthz; the route must be https unless --allow-http accepts plain http (for a
// route that only registries inside a private network call), its certificate trusted by the
// system's roots or by the CAs of --ca-file (a private CA that every registry calling the route
// trusts). The kubeconfig is --kubeconfig's,
// else $KUBECONFIG's, else ~/.kube/config, else the in-cluster configuration.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/imagereflector/reflector/internal/preflight"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, httpProber, colorful(os.Stdout)))
}

const usage = `usage: reflector check [--pre] [--allow-http] [--ca-file=FILE] [--kubeconfig=FILE] [--context=NAME] [--timeout=DURATION]`

// prober makes the Prober that asks the webhook route, trusting the CA certificates of the PEM
// file caFile besides the system's roots ("": the system's alone).
type prober func(caFile string) (preflight.Prober, error)

// httpProber is the command's prober: a GET of at most 5 seconds.
func httpProber(caFile string) (preflight.Prober, error) {
	client := &http.Client{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		client.Transport = transport
	}
	return preflight.HTTPProber(client, 5*time.Second), nil
}

// run runs the command line args, printing to stdout and stderr, and returns the exit code.
// newProbe makes the Prober of the webhook route's check.
func run(args []string, stdout, stderr io.Writer, newProbe prober, color bool) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pre := fs.Bool("pre", false, "check only the prerequisites, before reflector is installed")
	allowHTTP := fs.Bool("allow-http", false, "accept a webhook route of plain http (registries inside a private network only)")
	caFile := fs.String("ca-file", "", "PEM file of CA certificates to trust for the webhook route besides the system's (a private CA that every registry calling the route trusts)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	kubecontext := fs.String("context", "", "the kubeconfig context (default: its current one)")
	timeout := fs.Duration("timeout", time.Minute, "how long the checks may take")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments %q\n%s\n", fs.Args(), usage)
		return 2
	}
	probe, err := newProbe(*caFile)
	if err != nil {
		fmt.Fprintln(stderr, "--ca-file:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cluster, err := read(ctx, *kubeconfig, *kubecontext)
	if err != nil {
		fmt.Fprintln(stderr, "reading the cluster:", err)
		return 2
	}
	results := preflight.Run(ctx, cluster, preflight.Options{Pre: *pre, Probe: probe, AllowHTTP: *allowHTTP})
	print(stdout, results, color)
	if preflight.Failed(results) {
		return 1
	}
	return 0
}

// read connects as the kubeconfig says and gathers what the checks look at.
func read(ctx context.Context, kubeconfig, kubecontext string) (*preflight.Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubecontext}).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "reflector-check"
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := preflight.Gather(ctx, kc, dc)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w (--timeout)", err)
	}
	return c, err
}

// print writes one line per result, ✔ in green or ✗ in red, and each failure's fix indented
// under it.
func print(w io.Writer, results []preflight.Result, color bool) {
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	for _, r := range results {
		mark := paint("32", "✔")
		if !r.OK {
			mark = paint("31", "✗")
		}
		fmt.Fprintf(w, "%s %s: %s\n", mark, r.Name, r.Message)
		if r.OK || r.Fix == "" {
			continue
		}
		for _, line := range strings.Split(r.Fix, "\n") {
			fmt.Fprintln(w, "    "+line)
		}
	}
}

// colorful tells whether f is a terminal that takes colours (NO_COLOR unset).
func colorful(f *os.File) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
