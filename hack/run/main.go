// Command run starts reflector on this machine, on 127.0.0.1 (see internal/stack): etcd,
// kube-apiserver, Debian's docker-registry, the scan and policy functions, the cron
// reconciler and Knative's ApiServerSource receive adapter, which brings annotations, spec
// edits and deletes to the functions as the Knative manifests' ApiServerSource does. It applies a demo ImageRepository with ImagePolicies that watch the local
// registry, pushes a few tags, and shows a live table that changes as you push more, with the
// state of each process the stack restarts. State stays in .reflector/, so a second run resumes;
// Ctrl-C stops everything.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/stack"
)

func main() {
	dir := flag.String("dir", ".reflector", "directory that holds the local state")
	once := flag.Bool("once", false, "stop once the demo policies have resolved, instead of showing a live table")
	flag.Parse()
	if err := run(*dir, *once); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}

func run(dir string, once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("building reflector and starting etcd, kube-apiserver, docker-registry, the functions, the cron reconciler and the ApiServerSource adapters ...")
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	s, err := stack.Start(startCtx, stack.Options{
		Dir: dir,
		Ports: stack.Ports{APIServer: 26443, Etcd: 22379, Registry: 25000, Scan: 28080, ScanEvents: 28082, Policy: 28081,
			ScanMetrics: 29095, PolicyMetrics: 29096, CronMetrics: 29097,
			SourceScanProfiling: 29098, SourcePolicyProfiling: 29099},
	})
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nstopping ...")
		s.Stop()
	}()
	image := s.Registry + "/demo/app"
	if _, err := s.Env.Apply(ctx, "default", []byte(demo(image))); err != nil {
		return fmt.Errorf("applying the demo objects: %w", err)
	}
	repo, err := s.Kube.Repositories.Get(ctx, "default", "demo-app")
	if err != nil {
		return err
	}
	if repo.Status.LastScanResult == nil {
		for _, tag := range []string{"1.0.0", "1.1.0", "1.2.0-rc.1"} {
			if _, err := stack.Push(image + ":" + tag); err != nil {
				return err
			}
		}
	}
	footer := fmt.Sprintf("Push a new tag:   go run ./hack/push %s:1.2.0\n"+
		"Use kubectl:      export KUBECONFIG=%s\n"+
		"Logs:             %s\n"+
		"Metrics:          %s %s %s\n"+
		"Ctrl-C stops everything; state stays in %s.\n",
		image, s.Env.Kubeconfig, strings.TrimSuffix(s.Log(stack.Scan), "scan.log")+"*.log",
		s.Metrics[stack.Scan], s.Metrics[stack.Policy], s.Metrics[stack.Cron], dir)
	changed := map[string]time.Time{}
	last := map[string]string{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		table, resolved, err := render(ctx, s.Kube, changed, last)
		if err != nil {
			return err
		}
		if once {
			if resolved || time.Now().After(deadline) {
				fmt.Print(table, "\n", processes(s), "\n", footer)
				if !resolved {
					return fmt.Errorf("the demo policies did not resolve within two minutes; see the logs")
				}
				return nil
			}
		} else {
			fmt.Print("\033[H\033[2J", table, "\n", processes(s), "\n", footer)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// demo returns the demo objects for image.
func demo(image string) string {
	return fmt.Sprintf(`apiVersion: image.toolkit.fluxcd.io/v1
kind: ImageRepository
metadata:
  name: demo-app
spec:
  image: %s
  interval: 1m
  insecure: true
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: demo-app-stable
spec:
  imageRepositoryRef:
    name: demo-app
  policy:
    semver:
      range: ^1.x
---
apiVersion: image.toolkit.fluxcd.io/v1
kind: ImagePolicy
metadata:
  name: demo-app-preview
spec:
  imageRepositoryRef:
    name: demo-app
  policy:
    semver:
      range: '>=1.0.0-0'
  digestReflectionPolicy: IfNotPresent
`, image)
}

// render draws the table of policies and reports whether every policy has a latest image.
func render(ctx context.Context, c *kube.Client, changed map[string]time.Time, last map[string]string) (string, bool, error) {
	repos, err := c.Repositories.List(ctx, "", metav1.ListOptions{})
	if err != nil {
		return "", false, err
	}
	tags := map[string]string{}
	for _, r := range repos.Items {
		n := "-"
		if r.Status.LastScanResult != nil {
			n = fmt.Sprint(r.Status.LastScanResult.TagCount)
		}
		tags[r.Namespace+"/"+r.Name] = n
	}
	pols, err := c.Policies.List(ctx, "", metav1.ListOptions{})
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REPOSITORY\tTAGS\tPOLICY\tRULE\tLATEST\tCHANGED\tSTATUS")
	resolved := len(pols.Items) > 0
	for _, p := range pols.Items {
		key := p.Namespace + "/" + p.Name
		latest := "-"
		if ref := p.Status.LatestRef; ref != nil {
			latest = ref.Tag
			if ref.Digest != "" {
				latest += "@" + ref.Digest[:min(len(ref.Digest), 19)]
			}
		} else {
			resolved = false
		}
		if last[key] != latest {
			last[key], changed[key] = latest, time.Now()
		}
		status := ""
		if ready := apimeta.FindStatusCondition(p.Status.Conditions, v1.ReadyCondition); ready != nil {
			status = ready.Message
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", p.Spec.ImageRepositoryRef.Name,
			tags[p.RepositoryNamespace()+"/"+p.Spec.ImageRepositoryRef.Name], p.Name, rule(&p), latest,
			time.Since(changed[key]).Truncate(time.Second), status)
	}
	w.Flush()
	return b.String(), resolved, nil
}

// processes draws the table of the stack's processes: a policy's latest image goes stale while
// the functions are down, and this is where a person sees it.
func processes(s *stack.Stack) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROCESS\tPID\tSTATE")
	for _, c := range stack.Components() {
		st := s.Status(c)
		pid := "-"
		if st.PID != 0 {
			pid = fmt.Sprint(st.PID)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", c, pid, state(st))
	}
	w.Flush()
	return b.String()
}

// state says in a few words how a process is: "up", "up (2 restarts)", "down",
// "restarting in 4s (signal: killed)".
func state(st stack.Status) string {
	switch st.State {
	case stack.Up:
		switch st.Restarts {
		case 0:
			return "up"
		case 1:
			return "up (1 restart)"
		}
		return fmt.Sprintf("up (%d restarts)", st.Restarts)
	case stack.Restarting:
		// Whole seconds, rounded up: the table is redrawn every second.
		in := time.Duration(math.Ceil(st.RestartIn.Seconds())) * time.Second
		return fmt.Sprintf("restarting in %s (%s)", in, st.LastExit)
	}
	return string(st.State)
}

func rule(p *v1.ImagePolicy) string {
	switch ch := p.Spec.Policy; {
	case ch.SemVer != nil:
		return "semver " + ch.SemVer.Range
	case ch.Alphabetical != nil:
		return "alphabetical " + ch.Alphabetical.Order
	case ch.Numerical != nil:
		return "numerical " + ch.Numerical.Order
	}
	return "-"
}
