package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PodStart is when the node's programs say they finished each step of a pod's start, read from
// their logs: the kubelet's (volumes), containerd's (sandbox, containers) and the pod's own.
// The apiserver's view of a pod has timestamps of whole seconds; these have micro- or
// nanoseconds.
type PodStart struct {
	// Mounted is when the kubelet had set up the last of the pod's volumes.
	Mounted time.Time
	// Sandbox is when containerd had the pod's sandbox running: its network namespace with
	// the CNI's address and its pause container.
	Sandbox time.Time
	// Started is when containerd had started each of the pod's containers, by name.
	Started map[string]time.Time
}

// PodStart reads the start of pod namespace/name from the logs of the kubelet and containerd.
// A step that no log line reports yet is zero.
func (c *Cluster) PodStart(namespace, name string) (PodStart, error) {
	var ps PodStart
	f, err := os.Open(filepath.Join(c.Env.Dir, "kubelet.log"))
	if err != nil {
		return ps, err
	}
	ps.Mounted, err = kubeletMounted(f, namespace, name, time.Now().Year())
	f.Close()
	if err != nil {
		return ps, err
	}
	f, err = os.Open(filepath.Join(c.Env.Dir, "containerd.log"))
	if err != nil {
		return ps, err
	}
	defer f.Close()
	ps.Sandbox, ps.Started, err = containerdStarted(f, namespace, name)
	return ps, err
}

// Request is one request that Knative's queue-proxy logged in front of a function.
type Request struct {
	// End is when the queue-proxy wrote the line: when the answer had been sent.
	End time.Time
	// Latency is how long the request took, as the queue-proxy measured it.
	Latency time.Duration
	// URL is the request's URI.
	URL string
	// Status is the answer's HTTP status.
	Status int
}

// Start is when the request reached the queue-proxy.
func (r Request) Start() time.Time { return r.End.Add(-r.Latency) }

// FirstRequest returns the first request that container of pod namespace/name logged in
// Knative's request log format (config-observability's logging.enable-request-log with the
// default logging.request-log-template), from the pod's log files that the kubelet keeps.
// ok is false when there is none yet.
func (c *Cluster) FirstRequest(namespace, name, container string) (r Request, ok bool, err error) {
	logs, err := filepath.Glob(filepath.Join(c.Dir, "kubelet", "pod-logs", namespace+"_"+name+"_*", container, "*.log"))
	if err != nil || len(logs) == 0 {
		return r, false, err
	}
	f, err := os.Open(logs[0])
	if err != nil {
		return r, false, err
	}
	defer f.Close()
	return firstRequest(f)
}

// kubeletMounted returns the time of the last "MountVolume.SetUp succeeded" line for the pod
// in a kubelet log (klog's header has no year: year is used).
func kubeletMounted(r io.Reader, namespace, name string, year int) (time.Time, error) {
	var last time.Time
	pod := `pod="` + namespace + "/" + name + `"`
	err := eachLine(r, func(line string) error {
		if !strings.Contains(line, "MountVolume.SetUp succeeded") || !strings.Contains(line, pod) {
			return nil
		}
		t, err := klogTime(line, year)
		if err != nil {
			return err
		}
		if t.After(last) {
			last = t
		}
		return nil
	})
	return last, err
}

// klogTime parses the header of a klog line: "I1202 01:23:45.123456 ...", in local time.
func klogTime(line string, year int) (time.Time, error) {
	const layout = "0102 15:04:05.000000"
	if len(line) < 1+len(layout) {
		return time.Time{}, fmt.Errorf("not a klog line: %.80q", line)
	}
	t, err := time.ParseInLocation(layout, line[1:1+len(layout)], time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("not a klog line: %.80q: %w", line, err)
	}
	return t.AddDate(year, 0, 0), nil
}

// containerdStarted reads containerd's CRI log lines for the pod: when RunPodSandbox returned
// its sandbox, and when StartContainer returned for each container created in that sandbox.
// The lines name the pod by its sandbox's metadata ("&PodSandboxMetadata{Name:...,Uid:...,
// Namespace:...,"), containers by their sandbox's id and their own metadata.
func containerdStarted(r io.Reader, namespace, name string) (sandbox time.Time, started map[string]time.Time, err error) {
	started = map[string]time.Time{}
	sandboxes := map[string]bool{}    // ids of the pod's sandboxes
	containers := map[string]string{} // container id: name
	err = eachLine(r, func(line string) error {
		t, msg, ok := logrusLine(line)
		if !ok {
			return nil
		}
		switch {
		case strings.HasPrefix(msg, "RunPodSandbox for &PodSandboxMetadata{") && strings.Contains(msg, " returns sandbox id "):
			meta := msg[len("RunPodSandbox for &PodSandboxMetadata{"):]
			if field(meta, "Name") != name || field(meta, "Namespace") != namespace {
				return nil
			}
			if id, ok := quotedAfter(msg, " returns sandbox id "); ok {
				sandboxes[id] = true
				sandbox = t
			}
		case strings.HasPrefix(msg, "CreateContainer within sandbox ") && strings.Contains(msg, " returns container id "):
			sid, ok := quotedAfter(msg, "CreateContainer within sandbox ")
			if !ok || !sandboxes[sid] {
				return nil
			}
			_, meta, _ := strings.Cut(msg, "&ContainerMetadata{")
			if id, ok := quotedAfter(msg, " returns container id "); ok {
				containers[id] = field(meta, "Name")
			}
		case strings.HasPrefix(msg, "StartContainer for ") && strings.HasSuffix(msg, " returns successfully"):
			id, ok := quotedAfter(msg, "StartContainer for ")
			if c, mine := containers[id]; ok && mine {
				started[c] = t
			}
		}
		return nil
	})
	return sandbox, started, err
}

// logrusLine splits a line of logrus's text format, `time="..." level=info msg="..."`, into
// its time and its message.
func logrusLine(line string) (time.Time, string, bool) {
	ts, ok := quotedAfter(line, "time=")
	if !ok {
		return time.Time{}, "", false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, "", false
	}
	msg, ok := quotedAfter(line, " msg=")
	return t, msg, ok
}

// quotedAfter returns the Go-quoted string that follows the first prefix in s.
func quotedAfter(s, prefix string) (string, bool) {
	i := strings.Index(s, prefix)
	if i < 0 {
		return "", false
	}
	q, err := strconv.QuotedPrefix(s[i+len(prefix):])
	if err != nil {
		return "", false
	}
	u, err := strconv.Unquote(q)
	return u, err == nil
}

// field returns the value of key in a protobuf message's text form, "Key:value,Key:value,}".
func field(meta, key string) string {
	for _, kv := range strings.Split(meta, ",") {
		if k, v, ok := strings.Cut(kv, ":"); ok && k == key {
			return v
		}
	}
	return ""
}

// firstRequest reads a container's log file in the CRI format ("<RFC 3339 time> stdout F
// <line>") and returns the first request log line of Knative's default template.
func firstRequest(r io.Reader) (req Request, ok bool, err error) {
	err = eachLine(r, func(line string) error {
		if ok {
			return nil
		}
		req, ok, err = requestLine(line)
		return err
	})
	return req, ok, err
}

// Requests returns the requests that container logged in Knative's request log format, as
// FirstRequest reads them, in every pod of namespace whose name starts with prefix.
func (c *Cluster) Requests(namespace, prefix, container string) ([]Request, error) {
	logs, err := filepath.Glob(filepath.Join(c.Dir, "kubelet", "pod-logs", namespace+"_"+prefix+"*", container, "*.log"))
	if err != nil {
		return nil, err
	}
	var reqs []Request
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			return nil, err
		}
		err = eachLine(f, func(line string) error {
			r, ok, err := requestLine(line)
			if ok {
				reqs = append(reqs, r)
			}
			return err
		})
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return reqs, nil
}

// requestLine parses a container log line of Knative's request log; ok is false for another
// line.
func requestLine(line string) (req Request, ok bool, err error) {
	ts, rest, _ := strings.Cut(line, " ")
	stream, rest, _ := strings.Cut(rest, " ")
	_, text, _ := strings.Cut(rest, " ")
	if stream != "stdout" || !strings.Contains(text, `"httpRequest"`) {
		return req, false, nil
	}
	var entry struct {
		HTTPRequest struct {
			RequestURL string `json:"requestUrl"`
			Status     int    `json:"status"`
			Latency    string `json:"latency"`
		} `json:"httpRequest"`
	}
	if json.Unmarshal([]byte(text), &entry) != nil {
		return req, false, nil
	}
	end, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return req, false, fmt.Errorf("container log line without a time: %.80q", line)
	}
	lat, err := time.ParseDuration(entry.HTTPRequest.Latency)
	if err != nil {
		return req, false, fmt.Errorf("request log line with latency %q: %w", entry.HTTPRequest.Latency, err)
	}
	return Request{End: end, Latency: lat, URL: entry.HTTPRequest.RequestURL, Status: entry.HTTPRequest.Status}, true, nil
}

// eachLine calls fn with each line of r; lines of up to 1 MiB.
func eachLine(r io.Reader, fn func(string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if err := fn(sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}
