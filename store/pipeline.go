package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckPipelineName checks a pipeline name: the key of the pipeline's rows
// in every table, a metric label and a word of the log, status and
// dashboard output, which a person reads and types again and must see as it
// is. It returns an error saying what is wrong, for the caller to prefix
// with the name, when name is empty, only white space, starts or ends with
// white space (unicode.IsSpace), is not valid UTF-8 (naming the first bad
// byte and its offset), or holds a control character (Unicode category Cc:
// C0, DEL, C1), an invisible format character (category Cf, e.g. U+200B
// ZERO WIDTH SPACE, U+FEFF, U+202E RIGHT-TO-LEFT OVERRIDE: "demo" and
// "demo\u200b" print alike) or another character Unicode marks
// Default_Ignorable_Code_Point (Other_Default_Ignorable_Code_Point and
// Variation_Selector, e.g. U+3164 HANGUL FILLER, U+FE0F; DerivedCoreProperties.txt);
// those name the rune (U+200B). Inner spaces
// and any other letters, marks, digits, punctuation and symbols are fine
// ("ams-2", "Zürich", "Nederland – ov 2").
func CheckPipelineName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case strings.TrimSpace(name) == "":
		return errors.New("is blank: give a name")
	case strings.TrimSpace(name) != name:
		return errors.New("starts or ends with white space")
	}
	for i, r := range name {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(name[i:], string(utf8.RuneError)):
			return fmt.Errorf("is not valid UTF-8: byte %#02x at offset %d", name[i], i)
		case unicode.IsControl(r):
			return fmt.Errorf("holds %U, a control character", r)
		case unicode.Is(unicode.Cf, r):
			return fmt.Errorf("holds %U, an invisible format character (Unicode category Cf)", r)
		case unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector):
			return fmt.Errorf("holds %U, a character that renders as nothing (Unicode Default_Ignorable_Code_Point)", r)
		}
	}
	return nil
}

// CheckInstanceID tells whether id may be an instance id (run --instance-id,
// ClaimOptions.InstanceID): the rules of CheckPipelineName, at most 200
// bytes. It words what is wrong as the end of a sentence naming the id.
func CheckInstanceID(id string) error {
	if len(id) > 200 {
		return fmt.Errorf("is %d bytes long: want at most 200", len(id))
	}
	return CheckPipelineName(id)
}
