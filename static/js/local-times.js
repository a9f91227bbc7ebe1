// Every page: its <time datetime> elements shown in the reader's time zone (lib/times.js).
import { localizeTimes } from "./lib/times.js";

localizeTimes(document);
