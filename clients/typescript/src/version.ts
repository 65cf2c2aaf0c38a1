/** This client's version: the `version` of its package.json (a test keeps the two equal). */
export const VERSION = "0.1.0";
