// Times in the reader's time zone (issue 41): the server renders each <time datetime> in its own
// zone, named, so a page without script still says which; this rewrites them in the browser's
// zone, named too. A <time data-seconds> keeps its seconds (where they matter: a run's start
// and end); the others are to the minute.
(() => {
  const pad = (number) => String(number).padStart(2, "0");

  function zoneName(date) {
    const parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
    const zone = parts.find((part) => part.type === "timeZoneName");
    return zone ? zone.value : "";
  }

  function localStamp(date, withSeconds) {
    const day = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate());
    const clock = pad(date.getHours()) + ":" + pad(date.getMinutes()) + (withSeconds ? ":" + pad(date.getSeconds()) : "");
    return (day + " " + clock + " " + zoneName(date)).trim();
  }

  function localizeTimes(root) {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    root.querySelectorAll("time[datetime]").forEach((time) => {
      const date = new Date(time.dateTime);
      if (!time.dateTime || Number.isNaN(date.getTime())) return;
      time.textContent = localStamp(date, time.hasAttribute("data-seconds"));
      time.title = zone;
    });
  }

  window.localTimes = { localStamp, localizeTimes };
  localizeTimes(document);
})();
