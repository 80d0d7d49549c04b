package produce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ovstream/ovstream/feed/gtfsrt"
)

// MaxFeedBytes bounds one downloaded FeedMessage.
const MaxFeedBytes = 256 << 20

// PollConfig configures Poll.
type PollConfig struct {
	URLs     []string      // GTFS-realtime feeds (TripUpdates, VehiclePositions or both); required
	Interval time.Duration // time between the starts of two polls; default 30s
	Timeout  time.Duration // one HTTP request, body included; default 20s
	Attempts int           // tries per URL and poll (network errors, 5xx, 429); default 3
	Backoff  time.Duration // wait before the second try, doubling, capped at Interval; default 1s
	Polls    int           // stop after this many polls; 0 = until ctx ends
	// Header is added to every request (API keys); it is never printed.
	Header    http.Header
	Options   gtfsrt.Options // operator for feeds that carry none
	Retention time.Duration  // see gtfsrt.Stream; default gtfsrt.DefaultRetention
	Topics    Topics
	Producer  Config
	Client    *http.Client // nil = one with Timeout
	// Progress is called after each poll (the command prints a line).
	Progress func(PollReport)
	Sleep    func(ctx context.Context, d time.Duration) error // tests; nil = a timer
}

// FetchReport is what one URL gave in one poll.
type FetchReport struct {
	URL         string    // without query and user info (they may hold keys)
	Status      int       // HTTP status of the last attempt; 0 = no response
	Attempts    int       // requests made
	Bytes       int       // body size of a 200
	NotModified bool      // 304: the conditional request found nothing new
	FeedTime    time.Time // header timestamp of the feed (200 only)
	Predictions int       // new predictions mapped from it
	Positions   int       // new positions mapped from it
	Skipped     map[string]int
	Err         error // the poll's failure for this URL, after the retries
	// refused: asking again cannot change the answer (a 4xx other than
	// 408 and 429, or a 200 whose body gives no feed).
	refused bool
}

// FeedURLError is Poll's error for a feed URL that never gave a feed (a 200
// that maps, or a 304): at the first poll whose answer asking again cannot
// change (Refused: HTTP 404, 401, 403, a body that is no FeedMessage), else
// after PollConfig.Polls polls of failures that may pass (network errors,
// timeouts, 5xx, 429). A URL that gave a feed once is polled on whatever
// it answers later.
type FeedURLError struct {
	URL     string // without query and user info
	Poll    int    // the poll the error ended
	Refused bool
	Status  int   // HTTP status of the last answer; 0 = none
	Err     error // the last failure
}

func (e *FeedURLError) Error() string {
	if e.Refused {
		return fmt.Sprintf("feed URL %s answered %v at poll %d and never gave a feed: "+
			"check the URL (and --http-header where it needs a key)", e.URL, e.Err, e.Poll)
	}
	return fmt.Sprintf("feed URL %s never gave a feed in %d polls; last: %v", e.URL, e.Poll, e.Err)
}

func (e *FeedURLError) Unwrap() error { return e.Err }

// PollReport is one poll.
type PollReport struct {
	Poll       int // 1, 2, ...
	Started    time.Time
	Fetches    []FetchReport
	Produced   Counts
	Pending    int   // records whose production failed, retried at the next poll
	ProduceErr error // the production failure, if any
}

// feedState is what Poll keeps per URL between polls.
type feedState struct {
	url          string
	etag         string
	lastModified string
	stream       *gtfsrt.Stream
	fed          bool // a poll gave a feed (200 that maps, or 304)
}

// Poll polls cfg.URLs every cfg.Interval and produces the events each poll
// adds, with the once-only rule of gtfsrt.Stream across polls (per URL).
// Requests are conditional (If-None-Match with the last ETag,
// If-Modified-Since with the last Last-Modified); network errors, timeouts,
// 5xx and 429 are retried with backoff inside the poll; a URL that still
// fails is reported and polled again next time. Records the producer gave up
// on are kept and produced first at the next poll, so none is lost while the
// process runs. A URL that never gave a feed ends Poll with a
// *FeedURLError (see there for when). Poll returns nil after cfg.Polls
// polls, or ctx.Err().
func Poll(ctx context.Context, cfg PollConfig) error {
	if len(cfg.URLs) == 0 {
		return errors.New("produce: no feed URLs")
	}
	if err := cfg.Producer.Validate(); err != nil {
		return err
	}
	if err := cfg.Options.Validate(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	feeds := make([]*feedState, len(cfg.URLs))
	for i, u := range cfg.URLs {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return fmt.Errorf("produce: feed URL %q: want http(s)://host/path", displayURL(u))
		}
		feeds[i] = &feedState{url: u, stream: gtfsrt.NewStream(cfg.Options, cfg.Retention)}
	}
	var pending []Message
	lastFetch := make([]FetchReport, len(feeds))
	for n := 1; cfg.Polls == 0 || n <= cfg.Polls; n++ {
		rep := PollReport{Poll: n, Started: time.Now()}
		var res gtfsrt.Result
		for i, f := range feeds {
			fr, r := fetch(ctx, cfg, f)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.Fetches, lastFetch[i] = append(rep.Fetches, fr), fr
			f.fed = f.fed || fr.Err == nil
			if !f.fed && fr.refused {
				return &FeedURLError{URL: fr.URL, Poll: n, Refused: true, Status: fr.Status, Err: fr.Err}
			}
			if r != nil {
				res.Predictions = append(res.Predictions, r.Predictions...)
				res.Positions = append(res.Positions, r.Positions...)
			}
		}
		msgs := append(pending, messages(&res, cfg.Topics)...)
		pending = nil
		if len(msgs) > 0 {
			var failed []Message
			var mu sync.Mutex
			i := 0
			counts, err := Send(ctx, cfg.Producer, func() (Message, bool) {
				if i == len(msgs) {
					return Message{}, false
				}
				m := msgs[i]
				i++
				m.Ack = func(err error) {
					if err != nil {
						mu.Lock()
						failed = append(failed, m)
						mu.Unlock()
					}
				}
				return m, true
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			mu.Lock()
			pending = append(failed, msgs[i:]...)
			mu.Unlock()
			rep.Produced, rep.ProduceErr = counts, err
		}
		rep.Pending = len(pending)
		if cfg.Progress != nil {
			cfg.Progress(rep)
		}
		if cfg.Polls != 0 && n == cfg.Polls {
			break
		}
		if err := cfg.Sleep(ctx, time.Until(rep.Started.Add(cfg.Interval))); err != nil {
			return err
		}
	}
	var errs []error
	for i, f := range feeds {
		if !f.fed {
			errs = append(errs, &FeedURLError{URL: displayURL(f.url), Poll: cfg.Polls, Status: lastFetch[i].Status, Err: lastFetch[i].Err})
		}
	}
	if len(pending) > 0 {
		errs = append(errs, fmt.Errorf("produce: %d records could not be produced", len(pending)))
	}
	return errors.Join(errs...)
}

// messages turns mapped events into records (predictions first, as GTFSRT).
func messages(res *gtfsrt.Result, topics Topics) []Message {
	out := make([]Message, 0, len(res.Predictions)+len(res.Positions))
	for _, p := range res.Predictions {
		out = append(out, Message{Topic: topics.Predictions, Key: []byte(p.TripID), Value: EncodePrediction(p)})
	}
	for _, p := range res.Positions {
		out = append(out, Message{Topic: topics.Positions, Key: []byte(p.VehicleID), Value: EncodePosition(p)})
	}
	return out
}

// fetch gets f's feed with retries and maps it; r is nil when nothing new came.
func fetch(ctx context.Context, cfg PollConfig, f *feedState) (FetchReport, *gtfsrt.Result) {
	fr := FetchReport{URL: displayURL(f.url)}
	backoff := cfg.Backoff
	for {
		fr.Attempts++
		body, status, retryAfter, err := get(ctx, cfg, f)
		fr.Status = status
		if err == nil {
			switch status {
			case http.StatusNotModified:
				fr.NotModified = true
				return fr, nil
			case http.StatusOK:
				fr.Bytes = len(body)
				res, header, err := f.stream.Feed(body)
				fr.FeedTime = header
				if err != nil {
					fr.Err, fr.refused = err, true
					return fr, nil
				}
				Conform(res)
				fr.Predictions, fr.Positions, fr.Skipped = len(res.Predictions), len(res.Positions), res.Skipped
				return fr, res
			}
			err = fmt.Errorf("HTTP %d", status)
			if !(status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout) {
				fr.Err, fr.refused = err, true // a client error: retrying will not help
				return fr, nil
			}
		}
		if fr.Attempts >= cfg.Attempts || ctx.Err() != nil {
			fr.Err = err
			return fr, nil
		}
		wait := max(backoff, retryAfter)
		if err := cfg.Sleep(ctx, min(wait, cfg.Interval)); err != nil {
			fr.Err = err
			return fr, nil
		}
		backoff = min(2*backoff, cfg.Interval)
	}
}

// get makes one conditional request; body is set for a 200 only.
func get(ctx context.Context, cfg PollConfig, f *feedState) (body []byte, status int, retryAfter time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	for k, vs := range cfg.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Accept", "application/x-protobuf, application/octet-stream, */*")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "ovstream-produce")
	}
	if f.etag != "" {
		req.Header.Set("If-None-Match", f.etag)
	}
	if f.lastModified != "" {
		req.Header.Set("If-Modified-Since", f.lastModified)
	}
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return nil, 0, 0, scrubURLError(err)
	}
	defer resp.Body.Close()
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && secs > 0 {
			retryAfter = time.Duration(secs) * time.Second
		}
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil, resp.StatusCode, retryAfter, nil
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxFeedBytes+1))
	if err != nil {
		return nil, resp.StatusCode, 0, fmt.Errorf("read body: %w", scrubURLError(err))
	}
	if len(body) > MaxFeedBytes {
		return nil, resp.StatusCode, 0, fmt.Errorf("feed larger than %d bytes", MaxFeedBytes)
	}
	// Validators are kept only once a body was read in full.
	f.etag = resp.Header.Get("ETag")
	f.lastModified = resp.Header.Get("Last-Modified")
	return body, resp.StatusCode, 0, nil
}

// displayURL drops user info and query (API keys live there).
func displayURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// scrubURLError removes the URL (with its query) from a *url.Error.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, displayURL(ue.URL), ue.Err)
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
