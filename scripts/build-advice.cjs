// How to get the native addon when it is missing: the one advice every message that finds no
// addon gives (the install step's line, the loader's warning and ERR_NATIVE_UNAVAILABLE, the
// operator's commands, `waitprep doctor`), kept in one place so they never disagree. CommonJS
// and outside lib/ because the install step reads it before dist/ exists.
module.exports =
  'install a C++ compiler, make and python3, then run `npm rebuild waitprep` in your project ' +
  '(in a clone of waitprep: `npm run build:native:gyp`)';
