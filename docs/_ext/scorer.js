// resgrad's search scorer (html_search_scorer in conf.py): Sphinx's own scores, and a
// guide page ahead of the API entries that share its words. A topic's name is also an
// index entry of its guide page (the {index} line at its top), which scores highest of
// all for a search of that name; the lift below orders the rest the same way.
var Scorer = {
  score: (result) => {
    const [docname, _title, _anchor, _descr, score, _filename, _kind] = result;
    return docname.startsWith("guide/") ? score + GUIDE_LIFT : score;
  },
  // Sphinx's defaults (sphinx/themes/basic/static/searchtools.js)
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};
// a guide page whose title holds the word (15 + 12) above an API object named by it
// (objPartialMatch + objPrio[0] = 21; a whole-name match 26), its text (5 + 12) below
const GUIDE_LIFT = 12;
