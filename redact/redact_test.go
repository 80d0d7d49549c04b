package redact

import (
	"bytes"
	"testing"
)

// The filter replaces a secret of 4+ characters only where it stands as a
// whole value, never inside a longer word, and leaves shorter secrets alone
// (a one-letter password used to mangle every word holding that letter).
func TestRedactWholeValuesOnly(t *testing.T) {
	for _, tc := range []struct {
		name, url, in, want string
	}{
		{"one letter", "postgres://u:e@h/db", "connect to host: the server refused\n", "connect to host: the server refused\n"},
		{"three letters", "postgres://u:abc@h/db", "abc abcdef\n", "abc abcdef\n"},
		{"whole value", "postgres://u:hunter42@h/db", "password hunter42 was refused\n", "password xxxxx was refused\n"},
		{"inside a word", "postgres://u:hunter42@h/db", "hunter42x xhunter42 hunter42\n", "hunter42x xhunter42 xxxxx\n"},
		{"in a URL", "postgres://u:s3cr3t@h/db", "postgres://u:s3cr3t@h/db failed\n", "postgres://u:xxxxx@h/db failed\n"},
		{"URL-escaped", "postgres://u:p%40ss%2Fword@h/db", "dsn postgres://u:p%40ss%2Fword@h failed; p@ss/word\n",
			"dsn postgres://u:xxxxx@h failed; xxxxx\n"},
		{"symbol edges", "postgres://u:%21pass%21@h/db", "x!pass!y\n", "xxxxxxy\n"},
		{"quoted", "postgres://u:tiger2020@h/db", `{"password":"tiger2020"}` + "\n", `{"password":"xxxxx"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := DatabaseSecrets(tc.url)
			if got := String(tc.in, sec); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
			var b bytes.Buffer
			if _, err := NewWriter(&b, sec).Write([]byte(tc.in)); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("redactingWriter(%q) = %q, want %q", tc.in, b.String(), tc.want)
			}
		})
	}
}
