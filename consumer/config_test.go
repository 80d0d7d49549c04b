package consumer

import "testing"

// TestValidatePipeline: Validate applies store.CheckPipelineName to the
// pipeline name, after the default, so a library user cannot run a pipeline
// whose name is padded, holds a control or an invisible format character
// (Unicode Cf: it would print like another one) or is not UTF-8.
func TestValidatePipeline(t *testing.T) {
	for _, c := range []struct {
		name, want string // want: the pipeline in force, or Validate's error
	}{
		{"", "ovstream"},
		{"demo", "demo"},
		{"ams-2", "ams-2"},
		{"Zürich", "Zürich"},
		{"Nederland – ov 2", "Nederland – ov 2"},
		{"de\uFFFDmo", "de\uFFFDmo"}, // the replacement character itself is a visible symbol
		{" ", `consumer: pipeline " ": is blank: give a name`},
		{" demo", `consumer: pipeline " demo": starts or ends with white space`},
		{"demo\n", `consumer: pipeline "demo\n": starts or ends with white space`},
		{"a\x00b", `consumer: pipeline "a\x00b": holds U+0000, a control character`},
		{"ov\tstream", `consumer: pipeline "ov\tstream": holds U+0009, a control character`},
		{"ov\u0085stream", `consumer: pipeline "ov\u0085stream": holds U+0085, a control character`},
		{"demo\u200b", `consumer: pipeline "demo\u200b": holds U+200B, an invisible format character (Unicode category Cf)`},
		{"\ufeffdemo", `consumer: pipeline "\ufeffdemo": holds U+FEFF, an invisible format character (Unicode category Cf)`},
		{"demo\u202e2", `consumer: pipeline "demo\u202e2": holds U+202E, an invisible format character (Unicode category Cf)`},
		{"de\xffmo", `consumer: pipeline "de\xffmo": is not valid UTF-8: byte 0xff at offset 2`},
		{"Z\xc3rich", `consumer: pipeline "Z\xc3rich": is not valid UTF-8: byte 0xc3 at offset 1`},
	} {
		cfg := Config{Brokers: []string{"b:9092"}, PredictionsTopic: "p", Owner: "h:1", Pipeline: c.name}
		err := cfg.Validate()
		got := cfg.WithDefaults().Pipeline
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("Pipeline %q: got %q, want %q", c.name, got, c.want)
		}
	}
}
