// Command run starts reflector's local environment on 127.0.0.1: etcd and kube-apiserver with
// reflector's CRDs, applies the examples, and shows them with the defaults the API applied. State
// stays in .reflector/, so a second run resumes where the first stopped. Ctrl-C stops everything.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/testenv"
)

func main() {
	dir := flag.String("dir", ".reflector", "directory that holds the local state")
	apiPort := flag.Int("apiserver-port", 26443, "kube-apiserver port on 127.0.0.1")
	etcdPort := flag.Int("etcd-port", 22379, "etcd client port on 127.0.0.1")
	examples := flag.String("examples", "examples", "directory of manifests to apply")
	once := flag.Bool("once", false, "stop after applying and showing the examples")
	flag.Parse()
	if err := run(*dir, *apiPort, *etcdPort, *examples, *once); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}

func run(dir string, apiPort, etcdPort int, examples string, once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	abs, err := filepath.Abs(filepath.Join(dir, "kube"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return err
	}
	slog.Info("starting etcd and kube-apiserver", "dir", abs)
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	env, err := testenv.Start(startCtx, testenv.Options{Dir: abs, APIServerPort: apiPort, EtcdPort: etcdPort})
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		slog.Info("stopping")
		if err := env.Stop(); err != nil {
			slog.Error("stopping", "error", err)
		}
	}()
	files, err := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if _, err := env.Apply(ctx, "default", b); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	c, err := kube.New(env.Config)
	if err != nil {
		return err
	}
	if err := show(ctx, c); err != nil {
		return err
	}
	fmt.Printf("\nkubectl works with: export KUBECONFIG=%s\n", env.Kubeconfig)
	if once {
		return nil
	}
	fmt.Println("Ctrl-C stops everything; state stays in", dir)
	<-ctx.Done()
	return nil
}

// show prints the ImageRepositories and ImagePolicies with the fields the API defaulted.
func show(ctx context.Context, c *kube.Client) error {
	repos, err := c.Repositories.List(ctx, "", metav1.ListOptions{})
	if err != nil {
		return err
	}
	pols, err := c.Policies.List(ctx, "", metav1.ListOptions{})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IMAGEREPOSITORY\tIMAGE\tINTERVAL\tPROVIDER\tEXCLUSIONS")
	for _, r := range repos.Items {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%q\n", r.Namespace, r.Name, r.Spec.Image, r.Spec.Interval.Duration,
			r.Spec.Provider, r.Spec.ExclusionList)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "IMAGEPOLICY\tREPOSITORY\tPOLICY\tDIGESTS\tLATEST")
	for _, p := range pols.Items {
		policy := ""
		switch ch := p.Spec.Policy; {
		case ch.SemVer != nil:
			policy = "semver " + ch.SemVer.Range
		case ch.Alphabetical != nil:
			policy = "alphabetical " + ch.Alphabetical.Order
		case ch.Numerical != nil:
			policy = "numerical " + ch.Numerical.Order
		}
		latest := "-"
		if p.Status.LatestRef != nil {
			latest = p.Status.LatestRef.String()
		}
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Spec.ImageRepositoryRef.Name, policy,
			p.Spec.DigestReflectionPolicy, latest)
	}
	return w.Flush()
}
