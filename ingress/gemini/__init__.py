"""Google's Gemini API (`generateContent`, `streamGenerateContent`, `countTokens`, the models list): its wire
types, their strict decoder, the request read as the chat request that travels, the answers' shapes."""
