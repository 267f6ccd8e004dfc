// Command cron is reflector's reconcile fallback. Each pass lists every ImageRepository and
// ImagePolicy, decides what is due (never scanned, interval elapsed, edited, `flux reconcile`
// requested, digest refresh, retry after failure, deleted but held by the finalizer of Flux's
// controller) and sends it to the scan and policy functions as CloudEvents. With --once it runs one pass, as a
// Kubernetes CronJob does; otherwise it loops every --every.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/store"
)

// config is what the command's flags and environment set.
type config struct {
	once        bool
	every       time.Duration
	scanURL     string
	policyURL   string
	kubeconfig  string
	concurrency int
	spread      time.Duration
	pageSize    int64
	timeout     time.Duration
	storeDir    string
	storeEvery  time.Duration
	metricsAddr string
	// scanTokenFile and policyTokenFile hold the tokens presented to scanURL and policyURL.
	scanTokenFile, policyTokenFile string
}

// parseFlags parses the command line args (without the program name) into a config, reading
// $K_SINK and $REFLECTOR_STORE_DIR through getenv. As with the flag package's own command line,
// a bad flag is reported on stderr with the usage.
func parseFlags(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("cron", flag.ContinueOnError)
	fs.BoolVar(&c.once, "once", false, "run one pass and exit (for a CronJob)")
	fs.DurationVar(&c.every, "every", time.Minute, "time between passes; also the window each pass answers for")
	fs.StringVar(&c.scanURL, "scan-url", "", "where scan requests go (default $K_SINK)")
	fs.StringVar(&c.policyURL, "policy-url", "", "where policy requests go (default $K_SINK)")
	// A sender proves itself with a ServiceAccount token for the receiver's audience. The cron
	// reads it from a file, as Knative's SinkBinding mounts one for $K_SINK (the broker) at
	// /oidc/token: for a direct --scan-url or --policy-url the file is a projected
	// serviceAccountToken volume with that function's audience, which the kubelet renews. A
	// TokenRequest through client-go would need serviceaccounts/token create for the cron's
	// ServiceAccount, a grant that lets its holder mint tokens; a projected volume needs none.
	fs.StringVar(&c.scanTokenFile, "scan-token-file", "", "file whose token (for the scan function's audience) scan requests carry (default $K_SINK_TOKEN_FILE or /oidc/token)")
	fs.StringVar(&c.policyTokenFile, "policy-token-file", "", "file whose token (for the policy function's audience) policy requests carry (default $K_SINK_TOKEN_FILE or /oidc/token)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config or in-cluster)")
	fs.IntVar(&c.concurrency, "concurrency", 8, "dispatches under way at once")
	fs.DurationVar(&c.spread, "spread", 20*time.Second, "window over which dispatches are spread")
	fs.Int64Var(&c.pageSize, "page-size", kube.DefaultPageSize, "objects per list call")
	fs.DurationVar(&c.timeout, "timeout", 50*time.Second, "deadline of one pass")
	fs.StringVar(&c.storeDir, "store-dir", getenv("REFLECTOR_STORE_DIR"), "Badger tag store whose entries of deleted ImageRepositories each pass removes (default $REFLECTOR_STORE_DIR; none when empty)")
	fs.DurationVar(&c.storeEvery, "store-every", 10*time.Minute, "how often a pass reads the whole tag store, to rescan repositories whose tags are not stored and remove deleted ones' entries (0: every pass); a pass that lists a store failure reads it whatever this says")
	fs.StringVar(&c.metricsAddr, "metrics-addr", ":"+function.DefaultMetricsPort, "where the loop serves /metrics (none when empty; --once never serves)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	// $K_SINK is read after parsing, not given as the flags' default, because usage messages
	// print defaults and a sink URL may carry credentials.
	for _, u := range []*string{&c.scanURL, &c.policyURL} {
		if *u == "" {
			*u = getenv("K_SINK")
		}
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	} else if err != nil {
		os.Exit(2)
	}
	log := function.Logger(os.Stderr)
	slog.SetDefault(log)
	if !cfg.once && cfg.metricsAddr != "" {
		ms, err := function.ServeMetrics(cfg.metricsAddr, log)
		if err != nil {
			log.Error("cron failed", "error", err)
			os.Exit(1)
		}
		defer ms.Close()
	}
	if err := run(cfg, log); err != nil {
		log.Error("cron failed", "error", err)
		os.Exit(1)
	}
}

func run(cfg config, log *slog.Logger) error {
	if cfg.scanURL == "" || cfg.policyURL == "" {
		return errors.New("--scan-url and --policy-url (or K_SINK) are required")
	}
	kcfg, err := kube.Config(cfg.kubeconfig)
	if err != nil {
		return err
	}
	c, err := kube.New(kcfg)
	if err != nil {
		return err
	}
	scan, err := events.NewSender(cfg.scanURL, events.SourceCron, nil, events.WithTokenFile(cfg.scanTokenFile))
	if err != nil {
		return err
	}
	policy, err := events.NewSender(cfg.policyURL, events.SourceCron, nil, events.WithTokenFile(cfg.policyTokenFile))
	if err != nil {
		return err
	}
	pass := &reconcile.Pass{
		Kube: c, Scan: scan, Policy: policy,
		Period: cfg.every, StoreEvery: cfg.storeEvery, Spread: min(cfg.spread, cfg.every), Concurrency: cfg.concurrency,
		PageSize: cfg.pageSize, Log: log,
	}
	if cfg.storeDir != "" {
		// The lease holds the store only while a pass cleans it, so the functions keep it the
		// rest of the time.
		st := store.New(cfg.storeDir, store.WithLogger(log))
		defer st.Close()
		pass.Store = st
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !cfg.once {
		function.Release(function.ReleaseEvery(os.Getenv), ctx.Done())
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		sum, err := pass.Run(pctx)
		cancel()
		if err != nil {
			if cfg.once {
				return err
			}
			log.Error("pass failed", "error", err)
		} else {
			log.Info("pass", "summary", sum)
		}
		if cfg.once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.every):
		}
	}
}
