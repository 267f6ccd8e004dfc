// Command cron is reflector's reconcile fallback. Each pass lists every ImageRepository and
// ImagePolicy, decides what is due (never scanned, interval elapsed, edited, `flux reconcile`
// requested, digest refresh, retry after failure, deleted but held by the finalizer of Flux's
// controller) and sends it to the scan and policy functions as CloudEvents. With --once it runs one pass, as a Kubernetes CronJob does; otherwise it loops
// every --every.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/imagereflector/reflector/internal/events"
	"github.com/imagereflector/reflector/internal/function"
	"github.com/imagereflector/reflector/internal/kube"
	"github.com/imagereflector/reflector/internal/reconcile"
	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/store"
	"github.com/imagereflector/reflector/internal/trace"
)

func main() {
	var (
		once        = flag.Bool("once", false, "run one pass and exit (for a CronJob)")
		every       = flag.Duration("every", time.Minute, "time between passes; also the window each pass answers for")
		scanURL     = flag.String("scan-url", "", "where scan requests go (default $K_SINK)")
		policyURL   = flag.String("policy-url", "", "where policy requests go (default $K_SINK)")
		kubeconfig  = flag.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config or in-cluster)")
		concurrency = flag.Int("concurrency", 8, "dispatches under way at once")
		spread      = flag.Duration("spread", 20*time.Second, "window over which dispatches are spread")
		pageSize    = flag.Int64("page-size", kube.DefaultPageSize, "objects per list call")
		timeout     = flag.Duration("timeout", 50*time.Second, "deadline of one pass")
		storeDir    = flag.String("store-dir", os.Getenv("REFLECTOR_STORE_DIR"), "Badger tag store whose entries of deleted ImageRepositories each pass removes (default $REFLECTOR_STORE_DIR; none when empty)")
		metricsAddr = flag.String("metrics-addr", ":"+function.DefaultMetricsPort, "where the loop serves /metrics (none when empty; --once never serves)")
	)
	flag.Parse()
	// $K_SINK is read after parsing, not given as the flags' default, because usage messages
	// print defaults and a sink URL may carry credentials.
	for _, u := range []*string{scanURL, policyURL} {
		if *u == "" {
			*u = os.Getenv("K_SINK")
		}
	}
	log := slog.New(redact.Handler(trace.Handler(slog.NewJSONHandler(os.Stderr, nil))))
	slog.SetDefault(log)
	if !*once && *metricsAddr != "" {
		ms, err := function.ServeMetrics(*metricsAddr, log)
		if err != nil {
			log.Error("cron failed", "error", err)
			os.Exit(1)
		}
		defer ms.Close()
	}
	if err := run(*once, *every, *scanURL, *policyURL, *kubeconfig, *storeDir, *concurrency, *spread, *pageSize, *timeout, log); err != nil {
		log.Error("cron failed", "error", err)
		os.Exit(1)
	}
}

func run(once bool, every time.Duration, scanURL, policyURL, kubeconfig, storeDir string, concurrency int,
	spread time.Duration, pageSize int64, timeout time.Duration, log *slog.Logger) error {
	if scanURL == "" || policyURL == "" {
		return fmt.Errorf("--scan-url and --policy-url (or K_SINK) are required")
	}
	cfg, err := kube.Config(kubeconfig)
	if err != nil {
		return err
	}
	c, err := kube.New(cfg)
	if err != nil {
		return err
	}
	scan, err := events.NewSender(scanURL, events.SourceCron, nil)
	if err != nil {
		return err
	}
	policy, err := events.NewSender(policyURL, events.SourceCron, nil)
	if err != nil {
		return err
	}
	pass := &reconcile.Pass{
		Kube: c, Scan: scan, Policy: policy,
		Period: every, Spread: min(spread, every), Concurrency: concurrency, PageSize: pageSize, Log: log,
	}
	if storeDir != "" {
		// The lease holds the store only while a pass cleans it, so the functions keep it the
		// rest of the time.
		st := store.New(storeDir, store.WithLogger(log))
		defer st.Close()
		pass.Store = st
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		sum, err := pass.Run(pctx)
		cancel()
		if err != nil {
			if once {
				return err
			}
			log.Error("pass failed", "error", err)
		} else {
			log.Info("pass", "summary", sum)
		}
		if once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}
