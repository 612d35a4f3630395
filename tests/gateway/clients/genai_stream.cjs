// Google's @google/genai SDK, streaming (streamGenerateContent?alt=sse),
// configured only by the chat task's environment (GOOGLE_GEMINI_BASE_URL,
// GEMINI_API_KEY). Prints the text, then "USAGE {...}"; on an API error
// "ERROR {status, message}" and exit 3. argv[2]: the node_modules.
const path = require('path');
const { GoogleGenAI } = require(path.join(process.argv[2], '@google/genai'));

(async () => {
	const ai = new GoogleGenAI({});
	try {
		const stream = await ai.models.generateContentStream({
			model: 'gemini-test',
			contents: 'say hello',
		});
		let usage = null;
		for await (const chunk of stream) {
			process.stdout.write(chunk.text || '');
			if (chunk.usageMetadata)
				usage = chunk.usageMetadata;
		}
		console.log('\nUSAGE ' + JSON.stringify(usage));
	} catch (e) {
		console.log('ERROR ' + JSON.stringify({ status: e.status, name: e.name,
			message: e.message }));
		process.exit(3);
	}
})();
