package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ListTags reads every tag of the repository, page by page following the registry's Link
// headers to the end, and returns those that the exclusion list keeps. A registry that refuses
// the page size is asked again with smaller pages. A repository with more tags than the
// Client's limit is an error wrapping ErrTagLimit, never a truncated list.
func (s *Scan) ListTags(ctx context.Context) (Result, error) {
	ctx, cancel := context.WithDeadline(ctx, s.deadline)
	defer cancel()
	what := "listing tags of " + s.repo.Name()

	res := Result{PageSize: s.c.pageSize}
	next := &url.URL{
		Scheme:   s.repo.Scheme(),
		Host:     s.repo.RegistryStr(),
		Path:     fmt.Sprintf("/v2/%s/tags/list", s.repo.RepositoryStr()),
		RawQuery: "n=" + strconv.Itoa(res.PageSize),
	}
	// Kept tags are gathered in exactly sized slices per page and joined once at the end, so
	// allocation stays near twice the tags' headers instead of growing one slice by doubling.
	var kept [][]string
	var page []string
	var body bytes.Buffer
	count := 0
	for next != nil {
		var err error
		page, next, err = s.listPage(ctx, next, page[:0], &body, res.PageSize)
		if err != nil {
			if smaller := smallerPage(res.PageSize); pageTooLarge(err) && smaller > 0 && next != nil {
				res.PageSize = smaller
				next = withPageSize(next, smaller)
				continue
			}
			return Result{}, s.fail(ctx, what, err)
		}
		res.Pages++
		keep := make([]string, 0, len(page))
		for _, tag := range page {
			if !s.Excluded(tag) {
				keep = append(keep, tag)
			}
		}
		kept = append(kept, keep)
		if count += len(keep); count > s.c.maxTags {
			return Result{}, s.fail(ctx, what, fmt.Errorf(
				"%w: more than %d tags remain after the exclusion list, the most this reflector stores per repository; add exclusions or raise the limit",
				ErrTagLimit, s.c.maxTags))
		}
	}
	tags := slices.Concat(kept...)
	slices.Sort(tags)
	res.Tags = slices.Compact(tags)
	return res, nil
}

// Result is the outcome of a listing.
type Result struct {
	// Tags are the tags kept by the exclusion list, sorted in ascending byte order, without
	// duplicates.
	Tags []string
	// Pages is the number of pages read.
	Pages int
	// PageSize is the page size the registry accepted.
	PageSize int
}

// minPageSize is the smallest page size asked for after refusals; below it the refusal is
// unlikely to be about the size.
const minPageSize = 10

// maxPageBytes bounds one page's body, against a registry that ignores n and sends an
// unbounded list.
const maxPageBytes = 64 << 20

// listPage reads one page into buf, through body. On failure it returns u itself as the page
// to retry.
func (s *Scan) listPage(ctx context.Context, u *url.URL, buf []string, body *bytes.Buffer, size int) ([]string, *url.URL, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, u, err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, u, err
	}
	body.Reset()
	if _, err := body.ReadFrom(io.LimitReader(resp.Body, maxPageBytes+1)); err != nil {
		return nil, u, err
	}
	if body.Len() > maxPageBytes {
		return nil, nil, fmt.Errorf("GET %s: the tag list page is larger than %d MiB", u.Redacted(), maxPageBytes>>20)
	}
	page := struct {
		Tags []string `json:"tags"`
	}{Tags: buf}
	if err := json.Unmarshal(body.Bytes(), &page); err != nil {
		return nil, nil, fmt.Errorf("GET %s: the tag list is not valid JSON: %w", u.Redacted(), err)
	}
	next, err := nextPage(resp.Header.Values("Link"), u, size)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	return page.Tags, next, nil
}

// nextPage returns the rel="next" target of Link headers, resolved against the page it came
// with, or nil on the last page. A target on another host is refused, so that a registry cannot
// point the scan's credentials elsewhere, and so is the page itself. Registries that leave n
// out of the link would fall back to their own, often small, default page size; size is added
// then.
func nextPage(links []string, page *url.URL, size int) (*url.URL, error) {
	for _, header := range links {
		for link := range strings.SplitSeq(header, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(link), ";")
			if !ok || !isNext(params) {
				continue
			}
			target = strings.TrimSpace(target)
			if !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				return nil, fmt.Errorf("malformed Link header %q", header)
			}
			ref, err := url.Parse(target[1 : len(target)-1])
			if err != nil {
				return nil, fmt.Errorf("malformed Link header %q: %w", header, err)
			}
			next := page.ResolveReference(ref)
			if next.Host != page.Host {
				return nil, fmt.Errorf("the Link header points to another host, %q", next.Host)
			}
			if !next.Query().Has("n") {
				next = withPageSize(next, size)
			}
			if next.String() == page.String() {
				// Following it would read the same page until the deadline.
				return nil, fmt.Errorf("the Link header points to the page it came with")
			}
			return next, nil
		}
	}
	return nil, nil
}

// isNext reports whether Link parameters include rel="next".
func isNext(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(k, "rel") && strings.Contains(" "+strings.Trim(v, `"`)+" ", " next ") {
			return true
		}
	}
	return false
}

// withPageSize returns u asking for pages of size tags.
func withPageSize(u *url.URL, size int) *url.URL {
	q := u.Query()
	q.Set("n", strconv.Itoa(size))
	v := *u
	v.RawQuery = q.Encode()
	return &v
}

// smallerPage is the page size to try after size was refused, or 0 when there is none left:
// 100 first, as Quay and Docker Hub accept it, then halves.
func smallerPage(size int) int {
	next := size / 2
	if size > 100 {
		next = 100
	}
	if next < minPageSize {
		return 0
	}
	return next
}

// pageTooLarge reports whether err is a registry's refusal of the page size: a 400 carrying
// Quay's TOO_MANY_TAGS_REQUESTED, distribution's PAGINATION_NUMBER_INVALID, or no code at all.
func pageTooLarge(err error) bool {
	terr, ok := errors.AsType[*transport.Error](err)
	if !ok || terr.StatusCode != http.StatusBadRequest {
		return false
	}
	if len(terr.Errors) == 0 {
		return true
	}
	for _, d := range terr.Errors {
		if d.Code == "TOO_MANY_TAGS_REQUESTED" || d.Code == "PAGINATION_NUMBER_INVALID" {
			return true
		}
	}
	return false
}
