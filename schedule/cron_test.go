package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustLoad(t testing.TB, zone string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	return loc
}

// fires returns the first n times sched fires after from.
func fires(t testing.TB, expr string, loc *time.Location, from time.Time, n int) []time.Time {
	t.Helper()
	c, err := parseSchedule(expr, loc)
	require.NoError(t, err)
	var out []time.Time
	for cur := from; len(out) < n; {
		cur = c.next(cur)
		require.False(t, cur.IsZero())
		out = append(out, cur)
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func utcs(ss ...string) []time.Time {
	out := make([]time.Time, len(ss))
	for i, s := range ss {
		out[i] = utc(s)
	}
	return out
}

// In Europe/Berlin the clocks go forward on 2026-03-29 at 02:00 CET (01:00
// UTC) to 03:00 CEST, and back on 2026-10-25 at 03:00 CEST (01:00 UTC) to
// 02:00 CET.
func TestNextAcrossDaylightSaving(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	tests := []struct {
		name string
		expr string
		loc  *time.Location
		from string
		want []time.Time
	}{
		{
			name: "time of day in the skipped hour runs at the end of the gap",
			expr: "30 2 * * *", loc: berlin, from: "2026-03-27T12:00:00Z",
			want: utcs(
				"2026-03-28T01:30:00Z", // 02:30 CET
				"2026-03-29T01:00:00Z", // 03:00 CEST: 02:30 did not exist
				"2026-03-30T00:30:00Z", // 02:30 CEST
			),
		},
		{
			name: "time of day in the repeated hour runs the first time only",
			expr: "30 2 * * *", loc: berlin, from: "2026-10-23T12:00:00Z",
			want: utcs(
				"2026-10-24T00:30:00Z", // 02:30 CEST
				"2026-10-25T00:30:00Z", // 02:30 CEST; not again at 02:30 CET
				"2026-10-26T01:30:00Z", // 02:30 CET
			),
		},
		{
			name: "hourly follows real time when the clocks go forward",
			expr: "@hourly", loc: berlin, from: "2026-03-28T23:30:00Z",
			want: utcs(
				"2026-03-29T00:00:00Z", // 01:00 CET
				"2026-03-29T01:00:00Z", // 03:00 CEST: 02:00 did not exist
				"2026-03-29T02:00:00Z", // 04:00 CEST
			),
		},
		{
			name: "hourly runs both 02:00 when the clocks go back",
			expr: "0 * * * *", loc: berlin, from: "2026-10-24T22:30:00Z",
			want: utcs(
				"2026-10-24T23:00:00Z", // 01:00 CEST
				"2026-10-25T00:00:00Z", // 02:00 CEST
				"2026-10-25T01:00:00Z", // 02:00 CET
				"2026-10-25T02:00:00Z", // 03:00 CET
			),
		},
		{
			name: "daily at midnight is untouched by a change at 02:00",
			expr: "@daily", loc: berlin, from: "2026-03-28T12:00:00Z",
			want: utcs("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"),
		},
		{
			name: "minutes of a fixed hour in the gap run once, at its end",
			expr: "*/20 2 * * *", loc: berlin, from: "2026-03-28T12:00:00Z",
			want: utcs("2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:20:00Z"),
		},
		{
			// 02:00 runs at the end of the gap, 03:00 CEST, where the
			// 03:00 run is due too: one run, not two at the same instant.
			name: "a run at the end of the gap is not doubled",
			expr: "0 2,3 * * *", loc: berlin, from: "2026-03-28T12:00:00Z",
			want: utcs("2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T01:00:00Z"),
		},
		{
			name: "every is a fixed interval of real time, counted from the epoch",
			expr: "@every 90m", loc: berlin, from: "2026-03-29T00:15:00Z",
			want: utcs("2026-03-29T01:30:00Z", "2026-03-29T03:00:00Z"),
		},
		{
			name: "seconds field",
			expr: "15 30 2 * * *", loc: time.UTC, from: "2026-03-28T12:00:00Z",
			want: utcs("2026-03-29T02:30:15Z", "2026-03-30T02:30:15Z"),
		},
		{
			name: "UTC has no gap",
			expr: "30 2 * * *", loc: time.UTC, from: "2026-03-28T12:00:00Z",
			want: utcs("2026-03-29T02:30:00Z", "2026-03-30T02:30:00Z"),
		},
		{
			// Lord Howe Island moves its clocks by 30 minutes.
			name: "half-hour daylight saving shift",
			expr: "15 2 * * *", loc: mustLoad(t, "Australia/Lord_Howe"), from: "2026-10-03T00:00:00Z",
			want: utcs(
				"2026-10-03T15:30:00Z", // Oct 4: 02:00 +10:30 became 02:30 +11, over 02:15
				"2026-10-04T15:15:00Z", // 02:15 +11
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fires(t, tt.expr, tt.loc, utc(tt.from), len(tt.want))
			for i := range got {
				got[i] = got[i].UTC()
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// wallOf returns t's local wall-clock time as a UTC time, where no hour
// is skipped or repeated.
func wallOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}

// matchesWall reports whether the fields of s match the wall-clock time
// w, with cron's rule that day-of-month and day-of-week are OR-ed when
// both are restricted.
func matchesWall(s *cronSchedule, w time.Time) bool {
	sp := s.fields
	bit := func(field uint64, v int) bool { return field&(1<<uint(v)) != 0 }
	dom, dow := bit(sp.Dom, w.Day()), bit(sp.Dow, int(w.Weekday()))
	day := dom && dow
	if sp.Dom&starBit == 0 && sp.Dow&starBit == 0 {
		day = dom || dow
	}
	return bit(sp.Second, w.Second()) && bit(sp.Minute, w.Minute()) && bit(sp.Hour, w.Hour()) && bit(sp.Month, int(w.Month())) && day
}

// referenceFires lists, minute by minute of real time, when s must fire
// in [from, to): every instant whose local time matches, except, for a
// schedule with a fixed hour, a local time shown a second time; plus, for
// such a schedule, the instant the clocks jumped over a matching local
// time.
func referenceFires(s *cronSchedule, from, to time.Time) []time.Time {
	var out []time.Time
	for m := from; m.Before(to); m = m.Add(time.Minute) {
		local := m.In(s.loc)
		fire := matchesWall(s, wallOf(local))
		if fire && s.wallClock {
			for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
				if wallOf(m.Add(-back).In(s.loc)).Equal(wallOf(local)) {
					fire = false // shown before the clocks went back
				}
			}
		}
		if !fire && s.wallClock {
			prev, cur := wallOf(m.Add(-time.Minute).In(s.loc)), wallOf(local)
			for w := prev.Add(time.Minute); w.Before(cur); w = w.Add(time.Minute) {
				if matchesWall(s, w) {
					fire = true // the clocks jumped over w
				}
			}
		}
		if fire {
			out = append(out, m)
		}
	}
	return out
}

// TestNextMatchesReference compares next with referenceFires for many
// schedules over several days around daylight saving changes in zones
// that move by an hour (at 02:00, and at midnight in São Paulo's 2018
// rules) and by half an hour.
func TestNextMatchesReference(t *testing.T) {
	windows := []struct {
		zone string
		from string
	}{
		{"Europe/Berlin", "2026-03-27T00:00:00Z"},
		{"Europe/Berlin", "2026-10-23T00:00:00Z"},
		{"America/New_York", "2026-03-06T00:00:00Z"},
		{"America/New_York", "2026-10-30T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-10-02T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-03T00:00:00Z"},
		{"America/Sao_Paulo", "2018-11-02T00:00:00Z"},
		{"America/Sao_Paulo", "2019-02-15T00:00:00Z"},
		{"UTC", "2026-03-27T00:00:00Z"},
	}
	specs := []string{
		"30 2 * * *", "0 2 * * *", "15,45 1-3 * * *", "*/20 2 * * *", "0 2,3 * * *",
		"0 0 * * *", "30 0 * * *", "59 1 * * *", "0 3 * * 0", "0 12 * * *", "@daily", "@weekly",
		"0 * * * *", "30 */2 * * *", "*/15 * * * *", "@hourly",
	}
	for _, w := range windows {
		loc := mustLoad(t, w.zone)
		from := utc(w.from)
		to := from.Add(4 * 24 * time.Hour)
		for _, expr := range specs {
			t.Run(w.zone+" "+w.from[:10]+" "+expr, func(t *testing.T) {
				s, err := parseSchedule(expr, loc)
				require.NoError(t, err)
				want := referenceFires(s, from, to)
				var got []time.Time
				for cur := from.Add(-time.Second); ; {
					cur = s.next(cur)
					if !cur.Before(to) {
						break
					}
					got = append(got, cur.UTC())
				}
				assert.Equal(t, want, got)
			})
		}
	}
}
