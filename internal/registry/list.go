package registry

import (
	"context"
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
// headers to the end, and returns those that the tag grammar allows and the exclusion list
// keeps; Result.Invalid counts the tags left out for their grammar. Each page is read as a
// stream within fixed bounds (see decodePage). A registry that refuses the page size is asked
// again with smaller pages. A repository with more tags than the Client's limit is an error
// wrapping ErrTagLimit, never a truncated list.
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
	count := 0
	keep := func(tag string) error {
		if s.Excluded(tag) {
			return nil
		}
		if count++; count > s.c.maxTags {
			return fmt.Errorf(
				"%w: more than %d tags remain after the exclusion list, the most this reflector stores per repository; add exclusions or raise the limit",
				ErrTagLimit, s.c.maxTags)
		}
		page = append(page, tag)
		return nil
	}
	for next != nil {
		var err error
		page = page[:0]
		next, err = s.listPage(ctx, next, res.PageSize, &res.Invalid, keep)
		if err != nil {
			if smaller := smallerPage(res.PageSize); pageTooLarge(err) && smaller > 0 && next != nil {
				res.PageSize = smaller
				next = withPageSize(next, smaller)
				continue
			}
			return Result{}, s.fail(ctx, what, err)
		}
		res.Pages++
		kept = append(kept, slices.Clone(page))
	}
	tags := slices.Concat(kept...)
	slices.Sort(tags)
	res.Tags = slices.Compact(tags)
	return res, nil
}

// Result is the outcome of a listing.
type Result struct {
	// Tags are the tags that the tag grammar allows and the exclusion list keeps, sorted in
	// ascending byte order, without duplicates.
	Tags []string
	// Pages is the number of pages read.
	Pages int
	// PageSize is the page size the registry accepted.
	PageSize int
	// Invalid counts the listed tags that the tag grammar does not allow, which Tags leaves out.
	Invalid InvalidTags
}

// minPageSize is the smallest page size asked for after refusals; below it the refusal is
// unlikely to be about the size.
const minPageSize = 10

// listPage reads one page, calling keep for each of its tags that the tag grammar allows
// (decodePage) and counting the others into invalid, and returns the next page, nil after the
// last. On a failure of the request it returns u itself as the page to retry.
func (s *Scan) listPage(ctx context.Context, u *url.URL, size int, invalid *InvalidTags, keep func(string) error) (*url.URL, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return u, err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return u, err
	}
	if err := decodePage(resp.Body, 2*s.c.maxTags, invalid, keep); err != nil {
		switch {
		case errors.Is(err, ErrTagLimit) && !errors.Is(err, errPageEntries):
			return nil, err
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errSyntax):
			return nil, fmt.Errorf("GET %s: the tag list is not valid JSON: %w", u.Redacted(), err)
		case errors.Is(err, errNotTagList):
			return nil, fmt.Errorf("GET %s: the answer is not a tag list: %w", u.Redacted(), err)
		}
		return nil, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	next, err := nextPage(resp.Header.Values("Link"), u, size)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	return next, nil
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
				return nil, fmt.Errorf("malformed Link header %s", quoteHeader(header))
			}
			ref, err := url.Parse(target[1 : len(target)-1])
			if err != nil {
				return nil, fmt.Errorf("malformed Link header %s: %w", quoteHeader(header), err)
			}
			next := page.ResolveReference(ref)
			if next.Host != page.Host {
				return nil, fmt.Errorf("the Link header points to another host, %s", quoteHeader(next.Host))
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

// maxQuoted bounds what an error quotes of a registry's header: a header can be megabytes.
const maxQuoted = 256

// quoteHeader quotes a header value, or its start, for an error message.
func quoteHeader(v string) string {
	if len(v) > maxQuoted {
		return strconv.Quote(v[:maxQuoted]) + "…"
	}
	return strconv.Quote(v)
}
