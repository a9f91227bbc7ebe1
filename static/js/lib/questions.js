// A waiting question's identity across the inbox socket's updates: its run and its interaction.

export const questionKey = (question) => question.request_id + ":" + question.interaction_id;
