package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ovstream/ovstream/export/otp"
	"github.com/ovstream/ovstream/redact"
)

func init() { register(newExportCmd) }

const otpLong = `p50 and p90 (nearest rank, whole seconds, early as 0) of the stop visits' delays per service id
of --calendar, trip and stop, as OpenTripPlanner 2.9's empirical_delay_calendar.csv and
empirical_delay_trip_times.csv in a zip file (--out X.zip) or a directory; the groups OTP would drop
are left out and counted. No row: exit 1, nothing written. docs/analysing.md "OpenTripPlanner".`

func newExportCmd() *cobra.Command {
	var o opsFlags
	var a otp.Args
	var out string
	c := &cobra.Command{Use: "otp-empirical-delay --out PATH", Short: "p50 and p90 delay per trip and stop, as OpenTripPlanner's empirical delay files",
		Long: otpLong, Args: noArgs, Example: "  ovstream export otp-empirical-delay --pipeline halifax --operator HFX --out empirical_delay.zip"}
	fs := c.Flags()
	o.register(fs, false)
	fs.StringVar(&out, "out", "", "`path` of the zip file (ending in .zip) or directory to write (required)")
	fs.StringVar(&a.From, "from", "", "first service day (start_date) to read, a `date` yyyy-mm-dd (default: the first)")
	fs.StringVar(&a.To, "to", "", "service day (start_date) to stop before, a `date` yyyy-mm-dd (default: none)")
	fs.StringVar(&a.Operator, "operator", "", "only the visits of this `operator` (one GTFS feed; default: all)")
	fs.StringVar(&a.Calendar, "calendar", otp.Calendars[0].Name, "service ids by day of the week: weekday-saturday-sunday, day-of-week or all-days")
	fs.Int64Var(&a.MinVisits, "min-visits", 5, "leave out the (service id, trip, stop) groups with fewer than `N` visits")
	fs.StringVar(&a.ValidFrom, "valid-from", "", "the calendar's start_date, a `date` yyyy-mm-dd (default: the first service day exported)")
	fs.StringVar(&a.ValidTo, "valid-to", "", "the calendar's end_date, a `date` yyyy-mm-dd (default: a year after the last service day exported)")
	c.RunE = run(func(ctx context.Context, stdout, stderr io.Writer, _ []string) int {
		const name = "export otp-empirical-delay"
		stderr = redact.NewWriter(stderr, o.secrets())
		a.Pipeline = o.pipeline
		q, err := a.Query()
		if err == nil && out == "" {
			err = errors.New("--out is required")
		}
		if err != nil {
			fmt.Fprintln(stderr, name+":", err)
			return exitUsage
		}
		pool, code := o.readPool(ctx, stderr, name, 0)
		if code != exitOK {
			return code
		}
		defer pool.Close()
		e, err := otp.Run(ctx, pool, q)
		if err == nil {
			err = e.Write(out)
		}
		if err != nil {
			fmt.Fprintln(stderr, "ovstream "+name+":", err)
			return exitError
		}
		fmt.Fprintf(stdout, "wrote %s: %s\n", out, e.Summary())
		return exitOK
	})
	return group("export", "write stored statistics in the formats of other tools", "Exports of the stored statistics for other tools.", c)
}
