// One AG-UI conversation with Airlock through @ag-ui/client's HttpAgent: a run that ends with an interrupt (an
// approval), then a run that resumes it. Prints what it saw as one JSON line. Used by tests/protocols/test_agui_client.py.
const { HttpAgent } = require("@ag-ui/client");

const EMAIL = { to: "ada@example.com", subject: "Hello", body: "Ship it." };

async function main() {
  const agent = new HttpAgent({
    url: process.env.AIRLOCK_AGUI_URL,
    headers: { Authorization: `Bearer ${process.env.AIRLOCK_TOKEN}` },
    threadId: process.env.AIRLOCK_THREAD,
  });
  let seen = [];
  const subscriber = { onEvent: ({ event }) => void seen.push(event.type) };

  agent.addMessage({ id: "m1", role: "user", content: `call send_email ${JSON.stringify(EMAIL)}` });
  await agent.runAgent({}, subscriber);
  const first = seen;
  const interrupts = agent.pendingInterrupts.map((i) => ({
    id: i.id,
    reason: i.reason,
    toolCallId: i.toolCallId,
    required: i.responseSchema && i.responseSchema.required,
  }));

  seen = [];
  const resume = interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }));
  await agent.runAgent({ resume }, subscriber);

  console.log(
    JSON.stringify({
      first,
      interrupts,
      second: seen,
      pendingAfter: agent.pendingInterrupts.length,
      messages: agent.messages.map((m) => ({ role: m.role, content: m.content, toolCalls: m.toolCalls })),
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
