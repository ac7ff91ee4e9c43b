// Compiles a Solidity file of tests/contracts with solc from npm (solcjs,
// offline) and prints {contract: {bytecode, runtime}} as JSON.
// Usage: node compile.mjs FILE.sol
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { createRequire } from 'node:module';

const solc = createRequire(import.meta.url)('solc');
const file = process.argv[2];
const input = {
  language: 'Solidity',
  sources: { [basename(file)]: { content: readFileSync(file, 'utf8') } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    outputSelection: { '*': { '*': ['evm.bytecode.object', 'evm.deployedBytecode.object'] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (output.errors ?? []).filter((e) => e.severity === 'error');
if (errors.length > 0) {
  console.error(errors.map((e) => e.formattedMessage).join('\n'));
  process.exit(1);
}
const contracts = {};
for (const [name, c] of Object.entries(output.contracts[basename(file)])) {
  contracts[name] = {
    bytecode: '0x' + c.evm.bytecode.object,
    runtime: '0x' + c.evm.deployedBytecode.object,
  };
}
console.log(JSON.stringify(contracts));
