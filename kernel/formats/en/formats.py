"""Date formats of the site and the admin: times to the second with their zone, in one
unambiguous order (issue 41), instead of English's "Dec. 4, 2026, 10:15 p.m."."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
