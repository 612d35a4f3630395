// The official Anthropic TypeScript SDK, streaming, configured only by the
// chat task's environment (ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN).
// Prints the text, then "USAGE {...}"; on an API error "ERROR {status, type,
// message}" and exit 3. argv[2]: the node_modules to load it from.
const path = require('path');
const { Anthropic } = require(path.join(process.argv[2], '@anthropic-ai/sdk'));

(async () => {
	const client = new Anthropic({ maxRetries: 2 });
	try {
		const stream = client.messages.stream({
			model: 'claude-test',
			max_tokens: 64,
			messages: [{ role: 'user', content: 'say hello' }],
		});
		stream.on('text', (t) => process.stdout.write(t));
		const msg = await stream.finalMessage();
		console.log('\nUSAGE ' + JSON.stringify(msg.usage));
	} catch (e) {
		console.log('ERROR ' + JSON.stringify({
			status: e.status, type: e.error && e.error.error && e.error.error.type,
			name: e.constructor && e.constructor.name, message: e.message }));
		process.exit(3);
	}
})();
