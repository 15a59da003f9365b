package runner

// The IANA time zone database compiled in, so that --timezone
// (PDDConfig.Timezone, time.LoadLocation) works on hosts without
// /usr/share/zoneinfo (minimal containers). About 450 KB.
import _ "time/tzdata"
