// Times in the reader's own time zone (issue 41), named, and spans of time as people read them.

const pad = (number) => String(number).padStart(2, "0");

// HH:MM, with the seconds if asked.
export const timeOfDay = (date, withSeconds) =>
  pad(date.getHours()) + ":" + pad(date.getMinutes()) + (withSeconds ? ":" + pad(date.getSeconds()) : "");

function zoneName(date) {
  const parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
  const zone = parts.find((part) => part.type === "timeZoneName");
  return zone ? zone.value : "";
}

// YYYY-MM-DD HH:MM (with the seconds if asked) and the zone's short name.
export function localStamp(date, withSeconds) {
  const day = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate());
  return (day + " " + timeOfDay(date, withSeconds) + " " + zoneName(date)).trim();
}

// The server renders each <time datetime> in its own zone, named, so a page without script still
// says which; this rewrites them in the browser's zone. A <time data-seconds> keeps its seconds
// (where they matter: a run's start and end); the others are to the minute.
export function localizeTimes(root) {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  root.querySelectorAll("time[datetime]").forEach((time) => {
    const date = new Date(time.dateTime);
    if (!time.dateTime || Number.isNaN(date.getTime())) return;
    time.textContent = localStamp(date, time.hasAttribute("data-seconds"));
    time.title = zone;
  });
}

// How long something took, to the second: "42 s", "3 min 05 s", "2 h 07 min".
export function formatSpan(ms) {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 60) return seconds + " s";
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return minutes + " min " + pad(seconds % 60) + " s";
  return Math.floor(minutes / 60) + " h " + pad(minutes % 60) + " min";
}

// How long something has waited, to the minute: "less than a minute", "7 min", "3 h 05 min", "2 days".
export function formatWait(ms) {
  const minutes = Math.floor(Math.max(0, ms) / 60000);
  if (minutes < 1) return "less than a minute";
  if (minutes < 60) return minutes + " min";
  const hours = Math.floor(minutes / 60);
  return hours < 48 ? hours + " h " + pad(minutes % 60) + " min" : Math.floor(hours / 24) + " days";
}
