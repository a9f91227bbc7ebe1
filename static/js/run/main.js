// The run page (templates/runs/run_detail.html): renders the run's event log from
// /ws/runs/<id>/ and sends replies and cancels. Each concern is a module beside this one:
// socket.js (the connection), events.js (what each event shows), conversation.js, activity.js,
// reply.js, status.js, usage.js, result.js, logs.js, elapsed.js; state.js holds what they share.
import { startElapsed } from "./elapsed.js";
import { startLogs } from "./logs.js";
import { startReplies } from "./reply.js";
import { connect } from "./socket.js";
import { page } from "./state.js";

if (page) {
  startElapsed();
  startLogs();
  startReplies();
  connect();
}
