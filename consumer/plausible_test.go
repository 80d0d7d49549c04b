package consumer

import (
	"testing"
	"time"
)

// Validate takes MaxDelay at DefaultMaxDelay when it is zero and refuses a
// bound under 1s or over the data contract's one day.
func TestValidateMaxDelay(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string // the bound in force, or Validate's error
	}{
		{0, "12h0m0s"},
		{time.Second, "1s"},
		{24 * time.Hour, "24h0m0s"},
		{500 * time.Millisecond, "consumer: max delay 500ms: want 1s to 24h0m0s"},
		{24*time.Hour + time.Second, "consumer: max delay 24h0m1s: want 1s to 24h0m0s"},
		{-time.Hour, "consumer: max delay -1h0m0s: want 1s to 24h0m0s"},
	} {
		cfg := Config{Brokers: []string{"b:9092"}, PredictionsTopic: "p", Owner: "h:1", MaxDelay: c.in}
		got := cfg.WithDefaults().MaxDelay.String()
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("MaxDelay %v: got %q, want %q", c.in, got, c.want)
		}
	}
}
