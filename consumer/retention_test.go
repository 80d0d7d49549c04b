package consumer

import (
	"strings"
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "1.5d": 36 * time.Hour, "36h": 36 * time.Hour,
		"90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "2s": 2 * time.Second,
	} {
		if got, err := ParseAge("--retention", in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0d", "-1d", "-3h", "d", "x", "90", "1e400d", "9999999999d", "1w"} {
		_, err := ParseAge("--dead-letter-retention", in)
		if err == nil || !strings.Contains(err.Error(), "--dead-letter-retention") {
			t.Errorf("ParseAge(%q) = %v, want an error naming the flag", in, err)
		}
	}
}

func TestValidateRetention(t *testing.T) {
	base := Config{Brokers: []string{"b:9092"}, PredictionsTopic: "p", Owner: "h:1"}
	for _, c := range []struct {
		mod  func(*Config)
		want string // "" = valid
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.Retention, c.DeadLetterRetention = 90*24*time.Hour, 30*24*time.Hour }, ""},
		{func(c *Config) { c.Retention = 24 * time.Hour }, ""},
		{func(c *Config) { c.Retention = 2 * time.Hour }, "--retention 2h0m0s: want at least a day (1d)"},
		{func(c *Config) { c.Retention, c.Window = 24*time.Hour, 48*time.Hour }, "--retention 24h0m0s is shorter than the window (48h0m0s)"},
		{func(c *Config) { c.Retention = -time.Hour }, "--retention -1h0m0s is negative"},
		{func(c *Config) { c.DeadLetterRetention = -time.Hour }, "--dead-letter-retention -1h0m0s is negative"},
	} {
		cfg := base
		c.mod(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Validate = %v, want %q", err, c.want)
		case c.want == "" && cfg.WithDefaults().RetentionInterval != DefaultRetentionInterval:
			t.Errorf("RetentionInterval %v, want the default", cfg.WithDefaults().RetentionInterval)
		}
	}
}
