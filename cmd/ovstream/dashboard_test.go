package main

import (
	"strings"
	"testing"
)

// The demo's last lines say how to open the dashboard on its data, without
// the database password.
func TestPrintDashboardHint(t *testing.T) {
	var b strings.Builder
	printDashboardHint(&b, "./bin/ovstream", "postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable")
	want := "./bin/ovstream serve --database-url 'postgres://postgres@127.0.0.1:5432/ovstream?sslmode=disable'\n" +
		"then open in a browser (pages: delay, top, line, ontime, headway, accuracy, health):\n" +
		"  nl-ovapi-20141130            http://127.0.0.1:8080/?pipeline=demo-nl-ovapi&tz=Europe%2FAmsterdam\n" +
		"  auckland-20160519-peak10min  http://127.0.0.1:8080/?pipeline=demo-auckland&tz=Pacific%2FAuckland\n" +
		"  halifax-20251106             http://127.0.0.1:8080/?pipeline=demo-halifax&tz=America%2FHalifax\n"
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "password") {
		t.Errorf("hint:\n%s\nwant %q", b.String(), want)
	}
	b.Reset()
	printDashboardHint(&b, "ovstream", "postgres://app:s3cret-pw@db:5432/transit")
	if strings.Contains(b.String(), "s3cret-pw") || !strings.Contains(b.String(), "'postgres://app@db:5432/transit'") ||
		!strings.Contains(b.String(), "without its password") {
		t.Errorf("hint with a password:\n%s", b.String())
	}
}
