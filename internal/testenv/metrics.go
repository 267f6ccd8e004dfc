package testenv

import (
	"fmt"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus /metrics endpoint.
type Metrics map[string]*dto.MetricFamily

// Scrape reads the metrics that url serves in the text format.
func Scrape(t testing.TB, url string) Metrics {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the metrics of %s: %v", url, err)
	}
	return fams
}

// Value returns the value of the series of name whose labels include labels: a counter's or
// gauge's value, a histogram's sample count. It reports false when no series matches.
func (m Metrics) Value(name string, labels map[string]string) (float64, bool) {
	fam, ok := m[name]
	if !ok {
		return 0, false
	}
	sum, found := 0.0, false
series:
	for _, s := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue series
			}
		}
		found = true
		switch {
		case s.Counter != nil:
			sum += s.Counter.GetValue()
		case s.Gauge != nil:
			sum += s.Gauge.GetValue()
		case s.Histogram != nil:
			sum += float64(s.Histogram.GetSampleCount())
		case s.Untyped != nil:
			sum += s.Untyped.GetValue()
		}
	}
	return sum, found
}

// Has tells whether any series of name has labels among its labels.
func (m Metrics) Has(name string, labels map[string]string) bool {
	_, ok := m.Value(name, labels)
	return ok
}

// String names the metric families, for failure messages.
func (m Metrics) String() string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	return fmt.Sprint(names)
}
