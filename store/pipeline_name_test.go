package store

import (
	"strings"
	"testing"
	"unicode"
)

// CheckPipelineName's promise (a name a person sees as it is: "demo" and
// "demo\u200b" print alike, so U+200B is refused) holds for every code
// point that renders as nothing: Unicode's Default_Ignorable_Code_Point
// characters outside category Cf print alike too. The oracle is that
// property's list (DerivedCoreProperties.txt), less the categories the
// function refuses already.
func TestCheckPipelineNameRefusesDefaultIgnorables(t *testing.T) {
	for _, r := range []rune{
		0x034F,  // COMBINING GRAPHEME JOINER (Mn)
		0x115F,  // HANGUL CHOSEONG FILLER (Lo)
		0x1160,  // HANGUL JUNGSEONG FILLER (Lo)
		0x17B4,  // KHMER VOWEL INHERENT AQ (Mn)
		0x180B,  // MONGOLIAN FREE VARIATION SELECTOR ONE (Mn)
		0x3164,  // HANGUL FILLER (Lo)
		0xFE0F,  // VARIATION SELECTOR-16 (Mn)
		0xFFA0,  // HALFWIDTH HANGUL FILLER (Lo)
		0xE0100, // VARIATION SELECTOR-17 (Mn)
	} {
		if unicode.Is(unicode.Cf, r) || unicode.IsControl(r) {
			t.Fatalf("%U: the test wants characters outside Cc and Cf", r)
		}
		for _, name := range []string{"demo" + string(r), string(r) + "demo", "de" + string(r) + "mo"} {
			if err := CheckPipelineName(name); err == nil {
				t.Errorf("%q (%U, prints as %q) accepted", name, r, strings.Map(func(c rune) rune {
					if c == r {
						return -1
					}
					return c
				}, name))
			}
		}
	}
}
